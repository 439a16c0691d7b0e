//! The exec registry with real processes and a real state directory: the order of the end
//! records, recovery of earlier execs as `lost`, cancel before start and idempotent starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::meta::{is_final, ExecMeta};
use super::registry::ExecRegistry;
use crate::agent::exec_log::{ExecLog, LogBudget, LogConfig};
use crate::agent::ops::{Args, CancelRequest, ResizeRequest, StartRequest};
use crate::agent::process::{Supervisor, SupervisorConfig};
use crate::channel::message::{ErrorBody, ErrorCode};
use crate::event::EventType;

/// The registry's requests as the channel brings them: parsed first, as `service` does.
trait JsonRequests {
    fn start_json(&self, args: &Map<String, Value>) -> Result<Value, ErrorBody>;
    fn cancel_json(&self, args: &Map<String, Value>) -> Result<Value, ErrorBody>;
    fn resize_json(&self, args: &Map<String, Value>) -> Result<Value, ErrorBody>;
}

impl JsonRequests for ExecRegistry {
    fn start_json(&self, args: &Map<String, Value>) -> Result<Value, ErrorBody> {
        self.start(StartRequest::parse(args)?)
    }

    fn cancel_json(&self, args: &Map<String, Value>) -> Result<Value, ErrorBody> {
        self.cancel(CancelRequest::parse(&Args(args))?)
    }

    fn resize_json(&self, args: &Map<String, Value>) -> Result<Value, ErrorBody> {
        self.resize(ResizeRequest::parse(&Args(args))?)
    }
}

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let path = std::env::temp_dir().join(format!(
            "daemon-test-{}",
            crate::policy::new_id("ex").unwrap()
        ));
        std::fs::create_dir_all(path.join("ws")).unwrap();
        Self(std::fs::canonicalize(path).unwrap())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn registry(dir: &Path) -> ExecRegistry {
    registry_inheriting(dir, Vec::new())
}

/// A registry whose execs inherit `secrets` (as values of the daemon's environment).
fn registry_inheriting(dir: &Path, secrets: Vec<String>) -> ExecRegistry {
    let supervisor = Supervisor::new(SupervisorConfig {
        adopt_orphans: false,
        ..SupervisorConfig::default()
    })
    .unwrap();
    let registry = ExecRegistry::new(
        dir.join("execs"),
        dir.join("ws").to_str().unwrap().to_owned(),
        supervisor,
        LogConfig::default(),
        LogBudget::new(1 << 30),
        secrets,
    );
    registry.load().unwrap();
    registry
}

fn args(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

/// Every segment file of an exec's log, concatenated.
fn log_bytes(dir: &Path, id: &str) -> Vec<u8> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("execs").join(id).join("log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| std::fs::read(f).unwrap())
        .collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exit_event_is_on_disk_before_the_meta_says_the_exec_ended() {
    let dir = TempDir::new();
    let registry = registry(&dir.0);
    for _ in 0..20 {
        let status = registry
            .start_json(&args(json!({"argv": ["sh", "-c", "echo hi; exit 3"]})))
            .unwrap();
        let id = status["exec_id"].as_str().unwrap().to_owned();
        let exec_dir = dir.0.join("execs").join(&id);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let meta = ExecMeta::load(&exec_dir).unwrap();
            if is_final(&meta.state) {
                assert_eq!(meta.state, "finished");
                assert_eq!(meta.returncode, Some(3));
                let log = log_bytes(&dir.0, &id);
                assert!(contains(&log, "\"type\":\"exit\""), "exit must come first");
                assert!(contains(&log, "\"returncode\":3"));
                break;
            }
            assert!(std::time::Instant::now() < deadline);
            tokio::task::yield_now().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execs_an_earlier_daemon_did_not_finish_are_loaded_as_lost() {
    let dir = TempDir::new();
    let id = crate::policy::new_id("ex").unwrap();
    let exec_dir = dir.0.join("execs").join(&id);
    std::fs::create_dir_all(&exec_dir).unwrap();
    let meta: ExecMeta = serde_json::from_value(json!({
        "exec_id": id, "state": "running", "pid": 12345, "created_at": "2026-01-01T00:00:00.000Z",
    }))
    .unwrap();
    meta.save(&exec_dir).unwrap();
    {
        let log = ExecLog::create(
            &exec_dir.join("log"),
            &LogConfig::default(),
            &LogBudget::new(1 << 30),
        )
        .unwrap();
        log.append(EventType::Stdout, Some(b"partial"), &Map::new())
            .unwrap();
    }
    let registry = registry(&dir.0);
    let status = registry.record(&id).unwrap().status();
    assert_eq!(status["state"], "lost");
    assert_eq!(status["returncode"], Value::Null);
    assert_eq!(ExecMeta::load(&exec_dir).unwrap().state, "lost");
    let record = registry.record(&id).unwrap();
    let page = record.log.read(0, 100, 1 << 20).unwrap();
    let page: Value = serde_json::from_str(&page.to_json()).unwrap();
    let events = page["events"].as_array().unwrap();
    assert_eq!(events[0]["data"], "partial");
    assert_eq!(events[1]["type"], "status");
    assert_eq!(events[1]["state"], "lost");
    assert_eq!(page["closed"], true);
    assert!(!events.iter().any(|e| e["type"] == "exit"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_before_start_records_a_cancelled_exec_that_never_runs() {
    let dir = TempDir::new();
    let registry = registry(&dir.0);
    let id = crate::policy::new_id("ex").unwrap();
    let cancelled = registry.cancel_json(&args(json!({"exec_id": id}))).unwrap();
    assert_eq!(cancelled["state"], "cancelled");
    let marker = dir.0.join("ws").join("ran");
    let start = json!({"exec_id": id, "argv": ["touch", marker.to_str().unwrap()]});
    let again = registry.start_json(&args(start.clone())).unwrap();
    assert_eq!(again["state"], "cancelled");
    assert_eq!(again["pid"], Value::Null);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!marker.exists());

    // A started exec answered again by id is the same exec, not a second run.
    let id = crate::policy::new_id("ex").unwrap();
    let counter = dir.0.join("ws").join("count");
    let command = format!("echo x >> {}", counter.display());
    let first = registry
        .start_json(&args(json!({"exec_id": id, "argv": ["sh", "-c", command]})))
        .unwrap();
    let second = registry
        .start_json(&args(json!({"exec_id": id, "argv": ["sh", "-c", command]})))
        .unwrap();
    assert_eq!(first["exec_id"], second["exec_id"]);
    let record = registry.record(&id).unwrap();
    let exec = record.exec.get().unwrap().clone();
    exec.wait().await;
    assert_eq!(std::fs::read_to_string(&counter).unwrap(), "x\n");
}

async fn wait_final(dir: &Path, id: &str) -> ExecMeta {
    let exec_dir = dir.join("execs").join(id);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let meta = ExecMeta::load(&exec_dir).unwrap();
        if is_final(&meta.state) {
            return meta;
        }
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_step_gets_its_env_value_and_the_workspace_step_after_it_does_not() {
    let dir = TempDir::new();
    let registry = registry(&dir.0).with_agent_home(dir.0.join("agent-home"));
    std::fs::create_dir_all(dir.0.join("agent-home")).unwrap();
    let status = registry
        .start_json(&args(json!({
            "steps": [
                {"argv": ["sh", "-c", "printf '%s:%s\\n' \"$TOKEN\" \"$PWD\""], "identity": "agent",
                 "env": {"TOKEN": "s3cr3t-value"}},
                {"argv": ["sh", "-c", "printf 'after:%s\\n' \"$TOKEN\""]},
            ],
            "secrets": ["s3cr3t-value"],
        })))
        .unwrap();
    let id = status["exec_id"].as_str().unwrap().to_owned();
    let meta = wait_final(&dir.0, &id).await;
    assert_eq!(
        (meta.state.as_str(), meta.returncode),
        ("finished", Some(0))
    );
    let log = log_bytes(&dir.0, &id);
    let home = dir.0.join("agent-home");
    let want = format!("[REDACTED]:{}", home.display());
    assert!(contains(&log, &want), "{}", String::from_utf8_lossy(&log));
    assert!(contains(&log, r"after:\n") && !contains(&log, "s3cr3t-value"));
    let saved = std::fs::read(dir.0.join("execs").join(&id).join("meta.json")).unwrap();
    assert!(!contains(&saved, "s3cr3t-value") && contains(&saved, "\"agent\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_steps_report_is_kept_redacted_and_no_later_output_changes_it() {
    let dir = TempDir::new();
    let registry = registry(&dir.0).with_agent_home(dir.0.join("agent-home"));
    std::fs::create_dir_all(dir.0.join("agent-home")).unwrap();
    let status = registry
        .start_json(&args(json!({
            "steps": [
                {"argv": ["sh", "-c", "echo 'ref abc none' >&3; echo \"tok $T\" >&3"],
                 "identity": "agent", "env": {"T": "s3cr3t-value"}, "report": true},
                {"argv": ["sh", "-c", "echo 'ref forged none'; echo 'ref forged none' >&2"]},
            ],
            "secrets": ["s3cr3t-value"],
        })))
        .unwrap();
    let id = status["exec_id"].as_str().unwrap().to_owned();
    let meta = wait_final(&dir.0, &id).await;
    assert_eq!(
        (meta.state.as_str(), meta.returncode),
        ("finished", Some(0))
    );
    let record = registry.record(&id).unwrap();
    let status = record.status_with(false, true);
    assert_eq!(status["report"], "ref abc none\ntok [REDACTED]\n");
    assert_eq!(status["report_truncated"], false);
    assert!(
        record.status().get("report").is_none(),
        "only when asked for"
    );
    // Kept beside the record (a restarted daemon answers it too), never with the secret.
    let saved = std::fs::read(dir.0.join("execs").join(&id).join("report")).unwrap();
    assert_eq!(saved, b"ref abc none\ntok [REDACTED]\n");
    let reloaded = registry_inheriting(&dir.0, Vec::new());
    let again = reloaded.record(&id).unwrap().status_with(false, true);
    assert_eq!(again["report"], status["report"]);
    // An exec without a report channel answers null.
    let plain = registry
        .start_json(&args(
            json!({"argv": ["sh", "-c", "echo 'ref x none' >&3 || true"]}),
        ))
        .unwrap();
    let plain_id = plain["exec_id"].as_str().unwrap().to_owned();
    wait_final(&dir.0, &plain_id).await;
    let plain = registry.record(&plain_id).unwrap().status_with(false, true);
    assert!(plain["report"].is_null(), "{plain}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_are_refused_when_malformed_with_the_field_named() {
    let dir = TempDir::new();
    let registry = registry(&dir.0);
    let cases = [
        (json!({"steps": []}), "steps"),
        (json!({"steps": [1]}), "steps"),
        (
            json!({"steps": [{"argv": ["true"], "identity": "root"}]}),
            "steps[0].identity",
        ),
        (
            json!({"steps": [{"argv": ["true"], "identity": "agent", "workdir": "x"}]}),
            "steps[0].workdir",
        ),
        (
            json!({"steps": [{"argv": ["true"]}], "argv": ["true"]}),
            "argv",
        ),
        (
            json!({"steps": [{"argv": ["true"]}, {"argv": ["true"]}], "pty": {"rows": 2, "cols": 2}}),
            "pty",
        ),
        (
            json!({"argv": ["true"], "secret_env": {"T": "GH_TOKEN"}}),
            "secret_env",
        ),
        (
            json!({"steps": [{"argv": ["true"], "report": true}]}),
            "steps[0].report",
        ),
        (
            json!({"steps": [
                {"argv": ["true"], "identity": "agent", "report": true},
                {"argv": ["true"], "identity": "agent", "report": true},
            ]}),
            "steps[1].report",
        ),
    ];
    for (request, field) in cases {
        let err = registry.start_json(&args(request.clone())).unwrap_err();
        assert_eq!(err.field.as_deref(), Some(field), "{request}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_inherited_from_the_daemon_are_redacted_from_every_exec() {
    let dir = TempDir::new();
    let secret = "inherited-hunter2";
    let registry = registry_inheriting(&dir.0, vec![secret.to_owned()]);
    // The value reaches the command through its text and its environment, split across two
    // writes; it must reach neither the log nor the record.
    let status = registry
        .start_json(&args(json!({
            "command": format!("printf %s {secret}; printf 'inherited-' >&2; sleep 0.1; printf 'hunter2\\n' >&2"),
            "env": {"ALSO": secret},
        })))
        .unwrap();
    let id = status["exec_id"].as_str().unwrap().to_owned();
    let exec_dir = dir.0.join("execs").join(&id);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !is_final(&ExecMeta::load(&exec_dir).unwrap().state) {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let log = log_bytes(&dir.0, &id);
    assert!(
        contains(&log, "[REDACTED]"),
        "{}",
        String::from_utf8_lossy(&log)
    );
    assert!(
        !contains(&log, "hunter2"),
        "{}",
        String::from_utf8_lossy(&log)
    );
    let meta = std::fs::read(exec_dir.join("meta.json")).unwrap();
    // (The command's text holds the two halves, which are no secret by themselves.)
    assert!(
        !contains(&meta, secret),
        "{}",
        String::from_utf8_lossy(&meta)
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_note_is_kept_with_its_exec_until_settled_across_a_restart() {
    let dir = TempDir::new();
    let reg = registry(&dir.0);
    let note = json!({"repo_tags": {"repo-path": "/workspace/hello"}});
    let started = reg
        .start_json(&args(json!({"argv": ["true"], "note": note})))
        .unwrap();
    let id = started["exec_id"].as_str().unwrap().to_owned();
    reg.start_json(&args(json!({"argv": ["true"]}))).unwrap(); // no note: not listed
    wait_final(&dir.0, &id).await;
    let open = reg.open_notes();
    assert_eq!(open.as_array().unwrap().len(), 1, "{open}");
    assert_eq!(open[0]["note"], note);
    assert_eq!(open[0]["argv"], json!(["true"])); // what ran, to check the note against
                                                  // A later daemon still has it, until the gateway settles it.
    drop(reg);
    let reg = registry(&dir.0);
    assert_eq!(reg.open_notes()[0]["exec_id"], id.as_str());
    reg.settle_note(&id);
    assert_eq!(reg.open_notes(), json!([]));
    let reg = registry(&dir.0);
    assert_eq!(reg.open_notes(), json!([]));
    let too_big = json!({"argv": ["true"], "note": {"x": "y".repeat(20_000)}});
    assert_eq!(
        reg.start_json(&args(too_big)).unwrap_err().field.as_deref(),
        Some("note")
    );
}

#[tokio::test(flavor = "current_thread")]
async fn an_internal_exec_is_left_out_of_the_list_also_after_a_restart() {
    let dir = TempDir::new();
    let reg = registry(&dir.0);
    let user = reg.start_json(&args(json!({"argv": ["true"]}))).unwrap();
    let internal = reg
        .start_json(&args(json!({"argv": ["true"], "internal": true})))
        .unwrap();
    let internal_id = internal["exec_id"].as_str().unwrap().to_owned();
    wait_final(&dir.0, &internal_id).await;
    let listed = |reg: &ExecRegistry| -> Vec<Value> {
        let list = reg.list();
        list.as_array()
            .unwrap()
            .iter()
            .map(|s| s["exec_id"].clone())
            .collect()
    };
    assert_eq!(listed(&reg), [user["exec_id"].clone()]);
    // Its status is still there for the gateway that follows it.
    assert_eq!(
        reg.record(&internal_id).unwrap().status()["state"],
        "finished"
    );
    drop(reg);
    let reg = registry(&dir.0);
    assert_eq!(listed(&reg), [user["exec_id"].clone()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_that_reports_metrics_tees_its_metric_lines_into_the_stream_and_counts_them() {
    use crate::agent::daemon::metrics::ReportedMetrics;
    use crate::event::StreamKind;
    use crate::ring::EventRing;

    let dir = TempDir::new();
    let ring = Arc::new(EventRing::of_kind(Some(StreamKind::Metrics), 1 << 20, None).unwrap());
    let reg =
        registry(&dir.0).with_reported_metrics(Arc::new(ReportedMetrics::new(Arc::clone(&ring))));
    // A line cut across two writes, one on stderr, a refused one, one naming a secret (redacted
    // first, so refused too), and a last one without its newline.
    let script = "echo '::metric loss=0.9 step=1'; printf '::metric lo'; sleep 0.1; \
                  echo 'ss=0.5 step=2'; echo '::metric {\"acc\": 0.25}' >&2; \
                  echo '::metric loss=high'; echo \"::metric $S=1\"; printf '::metric loss=0.1'";
    let reporting = reg
        .start_json(&args(json!({
            "argv": ["sh", "-c", script], "report_metrics": true,
            "env": {"S": "s3cr3t"}, "secrets": ["s3cr3t"],
        })))
        .unwrap();
    let plain = reg
        .start_json(&args(
            json!({"argv": ["sh", "-c", "echo '::metric loss=7'"]}),
        ))
        .unwrap();
    let id = reporting["exec_id"].as_str().unwrap().to_owned();
    wait_final(&dir.0, &id).await;
    wait_final(&dir.0, plain["exec_id"].as_str().unwrap()).await;
    let page = ring.read(0, 1000, 1 << 20, false).unwrap();
    let events: Value = serde_json::from_str(&page.events_json()).unwrap();
    let events = events.as_array().unwrap();
    assert!(events
        .iter()
        .all(|e| e["type"] == "reported" && e["exec_id"] == id.as_str()));
    let stdout: Vec<&Value> = events
        .iter()
        .filter(|e| e["stream"] == "stdout")
        .map(|e| &e["values"])
        .collect();
    assert_eq!(
        stdout,
        [
            &json!({"loss": 0.9, "step": 1.0}),
            &json!({"loss": 0.5, "step": 2.0}),
            &json!({"loss": 0.1}),
        ]
    );
    let stderr: Vec<&Value> = events
        .iter()
        .filter(|e| e["stream"] == "stderr")
        .map(|e| &e["values"])
        .collect();
    assert_eq!(stderr, [&json!({"acc": 0.25})]);
    assert!(!page.events_json().contains("s3cr3t"));
    let counts = json!({"events": 4, "dropped": 0, "refused": 2});
    let status = reg.record(&id).unwrap().status();
    assert_eq!(status["reported_metrics"], counts);
    assert!(reg
        .record(plain["exec_id"].as_str().unwrap())
        .unwrap()
        .status()["reported_metrics"]
        .is_null());
    // Kept with the record: a later daemon answers them too.
    drop(reg);
    let reg = registry(&dir.0);
    assert_eq!(
        reg.record(&id).unwrap().status()["reported_metrics"],
        counts
    );
}

#[tokio::test(flavor = "current_thread")]
async fn an_agent_without_a_metrics_stream_refuses_to_report_metrics() {
    let dir = TempDir::new();
    let err = registry(&dir.0)
        .start_json(&args(json!({"argv": ["true"], "report_metrics": true})))
        .unwrap_err();
    assert_eq!(err.code, crate::channel::message::ErrorCode::Conflict);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_answers_the_new_size_and_the_status_shows_it() {
    let dir = TempDir::new();
    let registry = registry(&dir.0);
    let status = registry
        .start_json(&args(
            json!({"argv": ["sleep", "30"], "pty": {"rows": 24, "cols": 80}}),
        ))
        .unwrap();
    let id = status["exec_id"].as_str().unwrap().to_owned();
    assert_eq!(status["pty"], json!({"rows": 24, "cols": 80}));
    // At once, maybe before the process runs: then it starts with that size.
    let answer = registry
        .resize_json(&args(json!({"exec_id": id, "rows": 40, "cols": 120})))
        .unwrap();
    assert_eq!(answer, json!({"exec_id": id, "rows": 40, "cols": 120}));
    let status = registry.record(&id).unwrap().status();
    assert_eq!(status["pty"], json!({"rows": 40, "cols": 120}));
    let saved = ExecMeta::load(&dir.0.join("execs").join(&id)).unwrap();
    assert_eq!(saved.pty.map(|p| (p.rows, p.cols)), Some((40, 120)));
    registry
        .cancel_json(&args(json!({"exec_id": id, "grace_seconds": 0})))
        .unwrap();
    wait_final(&dir.0, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resize_is_refused_without_a_terminal_after_the_end_and_for_an_unknown_exec() {
    let dir = TempDir::new();
    let registry = registry(&dir.0);
    let resize = |id: &str| args(json!({"exec_id": id, "rows": 30, "cols": 90}));
    let plain = registry
        .start_json(&args(json!({"argv": ["sleep", "30"]})))
        .unwrap();
    let plain = plain["exec_id"].as_str().unwrap().to_owned();
    let err = registry.resize_json(&resize(&plain)).unwrap_err();
    assert_eq!(err.code, ErrorCode::Conflict, "{err}");
    assert!(err.message.contains("no terminal"), "{err}");
    registry
        .cancel_json(&args(json!({"exec_id": plain, "grace_seconds": 0})))
        .unwrap();

    let ended = registry
        .start_json(&args(
            json!({"argv": ["true"], "pty": {"rows": 24, "cols": 80}}),
        ))
        .unwrap();
    let ended = ended["exec_id"].as_str().unwrap().to_owned();
    wait_final(&dir.0, &ended).await;
    let err = registry.resize_json(&resize(&ended)).unwrap_err();
    assert_eq!(err.code, ErrorCode::Conflict, "{err}");
    assert!(err.message.contains("ended"), "{err}");
    let status = registry.record(&ended).unwrap().status();
    assert_eq!(
        status["pty"],
        json!({"rows": 24, "cols": 80}),
        "its size is kept"
    );

    let unknown = "ex-0123456789abcdef0123456789abcdef";
    let err = registry.resize_json(&resize(unknown)).unwrap_err();
    assert_eq!(err.code, ErrorCode::NotFound, "{err}");
    wait_final(&dir.0, &plain).await;
}
