//! One exec as the daemon records it: its log, its `meta.json`, and the sink that redacts its
//! output into the log (and, for an exec that reports metrics, reads it for them) and writes
//! `exit` and the final `status` before the meta says it ended.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use super::meta::{is_final, ExecMeta, PtyMeta, ReportMeta, REPORT_FILE};
use super::steps::redact_text;
use crate::agent::daemon::metrics::{ExecReports, ReportCounters, ReportedCounts};
use crate::agent::exec_log::{write_atomically, ExecLog};
use crate::agent::process::{
    Exec, ExecState, ExecStatus, ExitStatus, OutputSink, PtySize, Redactor, SinkFuture, StepReport,
    Stream,
};
use crate::event::timestamp;
use crate::event::EventType;

pub(crate) struct ExecRecord {
    pub(crate) id: String,
    pub(crate) dir: PathBuf,
    pub(crate) log: Arc<ExecLog>,
    pub(crate) meta: Mutex<ExecMeta>,
    /// Set once the process runs; `None` for execs an earlier daemon ran, or that never ran.
    pub(crate) exec: OnceLock<Exec>,
    /// Whether the `running` status event has been written.
    announced: Mutex<bool>,
    /// What became of its metric lines, while it runs here with `report_metrics`.
    reported: Option<Arc<ReportCounters>>,
}

pub(crate) fn time_string(t: Option<SystemTime>) -> Option<String> {
    let millis = t?.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_millis();
    Some(timestamp::format_millis(
        u64::try_from(millis).unwrap_or(u64::MAX),
    ))
}

fn fields(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

impl ExecRecord {
    pub(crate) fn new(id: String, dir: PathBuf, log: Arc<ExecLog>, meta: ExecMeta) -> Self {
        Self {
            id,
            dir,
            log,
            meta: Mutex::new(meta),
            exec: OnceLock::new(),
            announced: Mutex::new(false),
            reported: None,
        }
    }

    /// The record of an exec whose metric lines `counters` count.
    pub(crate) fn reporting(mut self, counters: Option<Arc<ReportCounters>>) -> Self {
        self.reported = counters;
        self
    }

    fn reported_counts(&self) -> Option<ReportedCounts> {
        self.reported.as_ref().map(|counters| counters.counts())
    }

    pub(crate) fn status(&self) -> Value {
        self.meta
            .lock()
            .status(self.log.last_seq(), self.reported_counts())
    }

    /// The status with what ran (`exec.status` with `"command": true`).
    pub(crate) fn status_with_command(&self) -> Value {
        self.status_with(true, false)
    }

    /// The status, with what ran (`command`) and the report of its step with a report channel
    /// (`report`) as `exec.status` asks for them.
    pub(crate) fn status_with(&self, command: bool, report: bool) -> Value {
        let (mut status, kept) = {
            let meta = self.meta.lock();
            let mut status = meta.status(self.log.last_seq(), self.reported_counts());
            if let (true, Value::Object(fields), Value::Object(ran)) =
                (command, &mut status, meta.command())
            {
                fields.extend(ran);
            }
            (status, meta.report)
        };
        if let (true, Value::Object(fields)) = (report, &mut status) {
            // Null until the step has ended, and for an exec without a report channel.
            let text = kept.and_then(|_| self.read_report());
            fields.insert(
                "report_truncated".into(),
                kept.is_some_and(|r| r.truncated).into(),
            );
            fields.insert("report".into(), text.map_or(Value::Null, Value::String));
        }
        status
    }

    fn read_report(&self) -> Option<String> {
        match std::fs::read(self.dir.join(REPORT_FILE)) {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            Err(e) => {
                tracing::error!(exec_id = %self.id, error = %e, "cannot read an exec's report");
                None
            }
        }
    }

    /// Keeps what the step with the report channel wrote there (called once, when it ends,
    /// before the exec's end is recorded): the file, then the meta that says it is there.
    fn keep_report(&self, text: &str, report: ReportMeta) {
        if let Err(e) = write_atomically(&self.dir.join(REPORT_FILE), text.as_bytes()) {
            tracing::error!(exec_id = %self.id, error = %e, "cannot write an exec's report");
            return;
        }
        self.update_meta(|meta| meta.report = Some(report));
    }

    /// The exec's note while the gateway has not settled it (with the status and what ran, so
    /// that the gateway can check the note against the exec).
    pub(crate) fn open_note(&self) -> Option<Value> {
        let note = {
            let meta = self.meta.lock();
            meta.note.clone().filter(|_| !meta.note_settled)?
        };
        let mut status = self.status_with_command();
        if let Value::Object(fields) = &mut status {
            fields.insert("note".into(), note);
        }
        Some(status)
    }

    /// Marks the note acted on, for good (written even after the exec has ended).
    pub(crate) fn settle_note(&self) {
        let mut meta = self.meta.lock();
        if meta.note.is_none() || meta.note_settled {
            return;
        }
        meta.note_settled = true;
        if let Err(e) = meta.save(&self.dir) {
            tracing::error!(exec_id = %self.id, error = %e, "cannot write an exec's meta.json");
        }
    }

    /// Records the terminal's new size, which the status then shows (a viewer that attaches
    /// later learns the size the exec's programs draw for).
    pub(crate) fn resized(&self, size: PtySize) {
        self.update_meta(|meta| {
            meta.pty = Some(PtyMeta {
                rows: size.rows,
                cols: size.cols,
            });
        });
    }

    pub(crate) fn state(&self) -> String {
        self.meta.lock().state.clone()
    }

    /// Applies `change` to the meta and writes it, unless the exec has already ended.
    fn update_meta(&self, change: impl FnOnce(&mut ExecMeta)) {
        self.change_meta(&mut self.meta.lock(), change);
    }

    fn change_meta(&self, meta: &mut ExecMeta, change: impl FnOnce(&mut ExecMeta)) {
        if is_final(&meta.state) {
            return;
        }
        change(meta);
        if let Err(e) = meta.save(&self.dir) {
            tracing::error!(exec_id = %self.id, error = %e, "cannot write an exec's meta.json");
        }
    }

    /// Writes the `running` status event and meta once the process runs (before its first
    /// output, whichever comes first).
    pub(crate) fn announce(&self) {
        if let Some(exec) = self.exec.get() {
            self.announce_for(exec);
        }
    }

    fn announce_for(&self, exec: &Exec) {
        let status = exec.status();
        let Some(pid) = status.pid else {
            return;
        };
        let mut announced = self.announced.lock();
        if *announced {
            return;
        }
        *announced = true;
        let event = fields(json!({"state": "running", "pid": pid}));
        if let Err(e) = self.log.append(EventType::Status, None, &event) {
            tracing::error!(exec_id = %self.id, error = %e, "cannot log an exec's start");
        }
        self.update_meta(|meta| {
            meta.state = "running".into();
            meta.pid = Some(pid);
            meta.started_at = time_string(status.started_at);
        });
        tracing::info!(exec_id = %self.id, pid, "exec running");
    }

    /// Records the end: `exit` and the final `status` in the log, the log closed, then the meta.
    pub(crate) fn conclude(
        &self,
        state: &str,
        exit: Option<ExitStatus>,
        error: Option<String>,
        started_at: Option<SystemTime>,
        ended_at: Option<SystemTime>,
    ) {
        let (returncode, signal) = match exit {
            Some(ExitStatus::Code(code)) => (Some(code), None),
            Some(ExitStatus::Signal(sig)) => (Some(-sig), Some(sig)),
            None => (None, None),
        };
        let mut exit_fields = json!({"returncode": returncode, "signal": signal, "state": state});
        if let Some(error) = &error {
            exit_fields["error"] = Value::String(error.clone());
        }
        // The meta's lock is held from before the log closes until the meta says the exec
        // ended: a client that saw the closed log and asks for the status (which takes this
        // lock) gets the final one, never `running`.
        let mut meta = self.meta.lock();
        let appended = self
            .log
            .append(EventType::Exit, None, &fields(exit_fields))
            .and_then(|_| {
                self.log
                    .append(EventType::Status, None, &fields(json!({"state": state})))
            })
            .and_then(|_| self.log.close());
        if let Err(e) = appended {
            tracing::error!(exec_id = %self.id, error = %e, "cannot log an exec's end");
        }
        let reported = self.reported_counts();
        self.change_meta(&mut meta, |meta| {
            meta.state = state.to_owned();
            meta.reported_metrics = reported.or(meta.reported_metrics);
            meta.returncode = returncode;
            meta.signal = signal;
            meta.error = error;
            if meta.started_at.is_none() {
                meta.started_at = time_string(started_at);
            }
            meta.ended_at = time_string(ended_at.or_else(|| Some(SystemTime::now())));
        });
        drop(meta);
        tracing::info!(exec_id = %self.id, state, ?returncode, "exec ended");
    }

    /// Marks an exec that an earlier daemon did not see end: `lost`, never finished. Its log
    /// gets a `status` event (no `exit`: nobody knows how it ended) and is closed.
    pub(crate) fn mark_lost(&self) {
        let mut meta = self.meta.lock(); // as in `conclude`
        if !self.log.is_closed() {
            let lost = fields(json!({"state": "lost"}));
            let result = self
                .log
                .append(EventType::Status, None, &lost)
                .and_then(|_| self.log.close());
            if let Err(e) = result {
                tracing::error!(exec_id = %self.id, error = %e, "cannot log that an exec was lost");
            }
        }
        self.change_meta(&mut meta, |meta| {
            meta.state = "lost".into();
            meta.ended_at = time_string(Some(SystemTime::now()));
        });
        drop(meta);
        tracing::warn!(exec_id = %self.id, "exec lost: an earlier agent ran it and did not record its end");
    }
}

/// Output of one exec: each stream through its own redactor, into the log; the report of its
/// step with a report channel, redacted, into its record.
pub(crate) struct LogSink {
    pub(crate) record: Arc<ExecRecord>,
    pub(crate) stdout: Mutex<Redactor>,
    pub(crate) stderr: Mutex<Redactor>,
    /// A redactor that has seen nothing yet, for the report.
    pub(crate) report: Redactor,
    /// For an exec started with `report_metrics`: reads the output as stored (redacted, so no
    /// secret value reaches the metrics stream) for metric lines.
    pub(crate) metrics: Option<ExecReports>,
}

impl LogSink {
    fn store(&self, stream: Stream, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let kind = match stream {
            Stream::Stdout => EventType::Stdout,
            Stream::Stderr => EventType::Stderr,
        };
        if let Err(e) = self.record.log.append(kind, Some(data), &Map::new()) {
            tracing::error!(exec_id = %self.record.id, error = %e, "cannot log an exec's output");
        }
        if let Some(metrics) = &self.metrics {
            metrics.scan(stream, data);
        }
    }
}

impl OutputSink for LogSink {
    fn output<'a>(&'a self, stream: Stream, chunk: &'a [u8]) -> SinkFuture<'a> {
        // The handle is stored right after the spawn returns, with no await in between: the
        // wait is at most that long, and keeps `running` ahead of the first output.
        self.record.announce_for(self.record.exec.wait());
        let redactor = match stream {
            Stream::Stdout => &self.stdout,
            Stream::Stderr => &self.stderr,
        };
        // Held while the output is stored and read, so that both see one stream in order.
        let mut redactor = redactor.lock();
        let data = redactor.redact(chunk);
        self.store(stream, &data);
        Box::pin(async {})
    }

    fn report(&self, report: StepReport) -> SinkFuture<'_> {
        let text = redact_text(&self.report, &String::from_utf8_lossy(&report.data));
        let kept = ReportMeta {
            truncated: report.truncated(),
        };
        // File writes (the report, meta.json), as at the end: on the blocking pool.
        let record = Arc::clone(&self.record);
        Box::pin(async move {
            let keep = move || record.keep_report(&text, kept);
            if let Err(e) = tokio::task::spawn_blocking(keep).await {
                tracing::error!(error = %e, "recording a step's report failed");
            }
        })
    }

    fn finished<'a>(&'a self, status: &'a ExecStatus) -> SinkFuture<'a> {
        if status.pid.is_some() {
            self.record.announce_for(self.record.exec.wait());
        }
        let out = self.stdout.lock().finish();
        self.store(Stream::Stdout, &out);
        let err = self.stderr.lock().finish();
        self.store(Stream::Stderr, &err);
        if let Some(metrics) = &self.metrics {
            metrics.finish();
        }
        // The end is several file writes (log segment, index, meta.json). On the blocking pool
        // they overlap with the ends of other execs; on the runtime's few workers (two on a
        // two-core machine) a cancel of many execs would queue every one behind the others.
        let record = Arc::clone(&self.record);
        let status = status.clone();
        Box::pin(async move {
            let conclude = move || {
                record.conclude(
                    state_name(status.state),
                    status.exit,
                    status.error.clone(),
                    status.started_at,
                    status.ended_at,
                );
            };
            if let Err(e) = tokio::task::spawn_blocking(conclude).await {
                tracing::error!(error = %e, "recording an exec's end failed");
            }
        })
    }
}

pub(crate) fn state_name(state: ExecState) -> &'static str {
    state.as_str()
}
