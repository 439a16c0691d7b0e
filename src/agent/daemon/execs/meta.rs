//! An exec's record on disk (`meta.json`): its spec without secret values, its state, pid,
//! outcome and times, replaced atomically; and the status object the protocol returns.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::agent::daemon::metrics::ReportedCounts;
use crate::agent::exec_log::write_atomically;
use crate::event::timestamp;

pub(crate) const META_FILE: &str = "meta.json";
/// Beside it: the report of the exec's step with a report channel (see [`ReportMeta`]).
pub(crate) const REPORT_FILE: &str = "report";

/// States after which nothing changes; `lost` is an exec an earlier daemon ran.
pub(crate) fn is_final(state: &str) -> bool {
    matches!(
        state,
        "finished" | "cancelled" | "failed" | "timed_out" | "lost"
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PtyMeta {
    pub(crate) rows: u16,
    pub(crate) cols: u16,
}

/// One step of a multi-step exec as recorded: who ran it and what, values redacted.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct StepMeta {
    pub(crate) identity: String,
    #[serde(default)]
    pub(crate) command: Option<String>,
    #[serde(default)]
    pub(crate) argv: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) env: Vec<(String, String)>,
    #[serde(default)]
    pub(crate) workdir: Option<String>,
    /// The step has the exec's report channel.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) report: bool,
}

/// The report of the step with a report channel: its first `MAX_REPORT_BYTES`, redacted like
/// everything recorded, as text (invalid UTF-8 replaced), is the file [`REPORT_FILE`] beside the
/// meta, read only when `exec.status` asks for it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(crate) struct ReportMeta {
    /// The step wrote more than was kept.
    #[serde(default)]
    pub(crate) truncated: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ExecMeta {
    pub(crate) exec_id: String,
    /// Shell text or argv, with secret values replaced by `[REDACTED]`.
    #[serde(default)]
    pub(crate) command: Option<String>,
    #[serde(default)]
    pub(crate) argv: Option<Vec<String>>,
    /// Environment, values redacted like the command.
    #[serde(default)]
    pub(crate) env: Vec<(String, String)>,
    #[serde(default)]
    pub(crate) workdir: Option<String>,
    /// The steps of a multi-step exec (then `command`, `argv`, `env` and `workdir` are unset).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) steps: Vec<StepMeta>,
    #[serde(default)]
    pub(crate) pty: Option<PtyMeta>,
    #[serde(default)]
    pub(crate) timeout_seconds: Option<f64>,
    #[serde(default)]
    pub(crate) kill_grace_seconds: f64,
    /// How many secret values were given (never the values).
    #[serde(default)]
    pub(crate) secrets: usize,
    pub(crate) state: String,
    #[serde(default)]
    pub(crate) pid: Option<u32>,
    #[serde(default)]
    pub(crate) returncode: Option<i32>,
    #[serde(default)]
    pub(crate) signal: Option<i32>,
    #[serde(default)]
    pub(crate) error: Option<String>,
    pub(crate) created_at: String,
    /// Milliseconds since the epoch at creation: orders `exec.list`.
    #[serde(default)]
    pub(crate) created_ms: u64,
    #[serde(default)]
    pub(crate) started_at: Option<String>,
    #[serde(default)]
    pub(crate) ended_at: Option<String>,
    /// What the gateway asked to be kept with the exec (the repo tags it records once the exec
    /// succeeds), until it says it has acted on it: out of the commands' reach, unlike anything
    /// in the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<Value>,
    #[serde(default)]
    pub(crate) note_settled: bool,
    /// The gateway's own exec (git for a repo status or diff), left out of `exec.list`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) internal: bool,
    /// Set once its step with a report channel has ended and its report is kept: out of the
    /// reach of every other step and of the workspace's processes, unlike the exec's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) report: Option<ReportMeta>,
    /// Set for an exec started with `report_metrics`: what became of its metric lines, as of
    /// its end (the record shows them live while it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reported_metrics: Option<ReportedCounts>,
}

impl ExecMeta {
    /// The record of an exec created now, in state `starting`, with nothing of its spec yet.
    pub(crate) fn starting(exec_id: &str) -> Self {
        let now = timestamp::now_millis();
        Self {
            exec_id: exec_id.to_owned(),
            command: None,
            argv: None,
            env: Vec::new(),
            workdir: None,
            steps: Vec::new(),
            pty: None,
            timeout_seconds: None,
            kill_grace_seconds: 0.0,
            secrets: 0,
            state: "starting".into(),
            pid: None,
            returncode: None,
            signal: None,
            error: None,
            created_at: timestamp::format_millis(now),
            created_ms: now,
            started_at: None,
            ended_at: None,
            note: None,
            note_settled: false,
            internal: false,
            report: None,
            reported_metrics: None,
        }
    }

    pub(crate) fn save(&self, dir: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        write_atomically(&dir.join(META_FILE), &json)
    }

    pub(crate) fn load(dir: &Path) -> std::io::Result<Self> {
        let bytes = std::fs::read(dir.join(META_FILE))?;
        serde_json::from_slice(&bytes).map_err(std::io::Error::other)
    }

    /// What ran, redacted, by whom: each step's identity and command. The gateway checks a
    /// repo operation's records against it, since only the gateway can start an agent step.
    pub(crate) fn command(&self) -> Value {
        let steps: Vec<Value> = self
            .steps
            .iter()
            .map(|step| {
                json!({"identity": step.identity, "argv": step.argv, "command": step.command})
            })
            .collect();
        json!({"argv": self.argv, "command": self.command, "steps": steps})
    }

    /// The protocol's status object; with `reported_metrics` for an exec that reports them
    /// (`reported`: the counts as they are now, else as recorded).
    pub(crate) fn status(&self, last_seq: u64, reported: Option<ReportedCounts>) -> Value {
        let mut status = json!({
            "exec_id": self.exec_id,
            "state": self.state,
            "pid": self.pid,
            "returncode": self.returncode,
            "signal": self.signal,
            "error": self.error,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "last_seq": last_seq,
            "pty": self.pty,
        });
        if let (Some(counts), Value::Object(fields)) =
            (reported.or(self.reported_metrics), &mut status)
        {
            fields.insert("reported_metrics".into(), json!(counts));
        }
        status
    }
}
