//! The exec registry: starting execs from validated requests, stdin in request order, cancel
//! (also before start), resize, reads, status, listing, and the records of earlier daemons.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

use super::entry::{Entries, Entry};
use super::io::{InputJob, PageRead};
use super::meta::{is_final, ExecMeta, PtyMeta};
use super::prune::Pruner;
use super::record::{ExecRecord, LogSink};
use super::steps::StepRules;
use crate::agent::daemon::askpass::Credentials;
use crate::agent::daemon::metrics::{ReportCounters, ReportedMetrics};
use crate::agent::exec_log::{ExecLog, LogBudget, LogConfig};
use crate::agent::ops::{internal, policy as policy_error, CancelRequest, StartRequest};
use crate::agent::ops::{InputRequest, ReadRequest, ResizeRequest};
use crate::agent::process::{Redactor, Supervisor};
use crate::channel::message::{ErrorBody, ErrorCode};
use crate::policy;

pub(crate) struct ExecRegistry {
    dir: PathBuf,
    /// How each step of a request becomes a spec (paths, identities, credentials).
    steps: StepRules,
    supervisor: Supervisor,
    config: LogConfig,
    budget: Arc<LogBudget>,
    /// Secret values every exec inherits from the daemon's environment: redacted from all.
    inherited_secrets: Vec<String>,
    pub(super) entries: Entries,
    /// How many ended execs are kept (see `prune`).
    max_ended: usize,
    /// Where an exec started with `report_metrics` puts them: the daemon's metrics stream.
    reported: Option<Arc<ReportedMetrics>>,
}

impl ExecRegistry {
    pub(crate) fn new(
        dir: PathBuf,
        root: String,
        supervisor: Supervisor,
        config: LogConfig,
        budget: Arc<LogBudget>,
        inherited_secrets: Vec<String>,
    ) -> Self {
        Self {
            dir,
            steps: StepRules::new(root),
            supervisor,
            config,
            budget,
            inherited_secrets,
            entries: Arc::new(Mutex::new(HashMap::new())),
            max_ended: super::prune::DEFAULT_MAX_ENDED_EXECS,
            reported: None,
        }
    }

    /// Execs started with `report_metrics` put the metric lines of their output in `stream`.
    pub(crate) fn with_reported_metrics(mut self, stream: Arc<ReportedMetrics>) -> Self {
        self.reported = Some(stream);
        self
    }

    /// Steps with a `credential` get `env` (the askpass socket and how to reach it) and their
    /// token is answered from `credentials`.
    pub(crate) fn with_askpass(
        mut self,
        credentials: Arc<Credentials>,
        env: Vec<(OsString, OsString)>,
    ) -> Self {
        self.steps.credentials = credentials;
        self.steps.askpass_env = env;
        self
    }

    /// Keep at most `max_ended` ended execs (the oldest to end go first).
    pub(crate) fn with_max_ended(mut self, max_ended: usize) -> Self {
        self.max_ended = max_ended;
        self
    }

    fn pruner(&self) -> Pruner {
        Pruner {
            entries: Arc::clone(&self.entries),
            max_ended: self.max_ended,
        }
    }

    /// Where agent-identity steps run (their HOME too, set by the supervisor's `agent_env`).
    pub(crate) fn with_agent_home(mut self, home: PathBuf) -> Self {
        self.steps.agent_home = home;
        self
    }

    /// Loads the execs of earlier daemons (those not ended in their meta become `lost`), then
    /// prunes the ended ones past the limit; returns how many it kept.
    pub(crate) fn load(&self) -> std::io::Result<usize> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(&self.dir)?;
        // The agent's alone: the state directory above is traversable (the git mirrors are read
        // by the workspace's clone step), and the records and logs are not the commands' to
        // read or list (an agent step's argv, its report).
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))?;
        let mut count = 0;
        for entry in std::fs::read_dir(&self.dir)? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if policy::check_id("ex", name).is_err() {
                continue;
            }
            let loaded = ExecMeta::load(&path).and_then(|meta| {
                let log = ExecLog::recover(&path.join("log"), &self.config, &self.budget)
                    .map_err(std::io::Error::other)?;
                Ok((meta, log))
            });
            let (meta, log) = match loaded {
                Ok(loaded) => loaded,
                Err(e) => {
                    tracing::warn!(exec_id = name, error = %e, "skipping an unreadable exec record");
                    continue;
                }
            };
            let ended = super::meta::is_final(&meta.state);
            let record = Arc::new(ExecRecord::new(name.to_owned(), path.clone(), log, meta));
            if !ended {
                record.mark_lost();
            } else if !record.log.is_closed() {
                let _ = record.log.close();
            }
            self.entries.lock().insert(
                name.to_owned(),
                Entry {
                    record,
                    input: None,
                },
            );
            count += 1;
        }
        Ok(count - self.pruner().prune())
    }

    pub(crate) fn record(&self, id: &str) -> Result<Arc<ExecRecord>, ErrorBody> {
        let id = policy::check_id("ex", id).map_err(|e| policy_error("exec_id", e))?;
        self.entries
            .lock()
            .get(&id)
            .map(|e| Arc::clone(&e.record))
            .ok_or_else(|| ErrorBody::new(ErrorCode::NotFound, format!("no exec '{id}'")))
    }

    /// Starts an exec, or answers the existing one when `exec_id` names it already.
    ///
    /// Either one command or steps (see [`StartRequest`]): each step runs only after the
    /// previous one exited 0, in the one event stream.
    pub(crate) fn start(&self, start: StartRequest) -> Result<Value, ErrorBody> {
        let id = match &start.exec_id {
            Some(id) => id.clone(),
            None => policy::new_id("ex").map_err(|e| internal("cannot make an exec id", e))?,
        };
        if let Some(existing) = self.entries.lock().get(&id) {
            return Ok(existing.record.status());
        }
        let metrics = match (start.report_metrics, &self.reported) {
            (false, _) => None,
            (true, Some(stream)) => Some(stream.for_exec(&id)),
            (true, None) => {
                return Err(ErrorBody::new(
                    ErrorCode::Conflict,
                    "this agent keeps no metrics stream to report metrics into",
                ))
            }
        };
        let redactor = Redactor::new(start.secrets.iter().chain(&self.inherited_secrets));
        let mut specs = Vec::new();
        let mut step_metas = Vec::new();
        for step in &start.steps {
            let (spec, meta) = self.steps.step(step, &redactor)?;
            specs.push(spec);
            step_metas.push(meta);
        }
        let mut specs = specs.into_iter().rev();
        let Some(mut spec) = specs.next() else {
            return Err(ErrorBody::invalid("steps", "give at least one step"));
        };
        for earlier in specs {
            spec = earlier.then(spec);
        }
        spec.pty = start.pty;
        spec.timeout = start.timeout;
        spec.kill_grace = start.kill_grace;
        let single = !start.as_steps;
        let first = step_metas.first().cloned().unwrap_or_default();
        let meta = ExecMeta {
            note: start.note,
            internal: start.internal,
            command: if single { first.command } else { None },
            argv: if single { first.argv } else { None },
            env: if single { first.env } else { Vec::new() },
            workdir: if single { first.workdir } else { None },
            steps: if single { Vec::new() } else { step_metas },
            pty: start.pty.map(|p| PtyMeta {
                rows: p.rows,
                cols: p.cols,
            }),
            timeout_seconds: spec.timeout.map(|t| t.as_secs_f64()),
            kill_grace_seconds: spec.kill_grace.as_secs_f64(),
            secrets: start.secrets.len(),
            ..ExecMeta::starting(&id)
        };
        // Checked again and created under the lock, so a racing start of the same id (from
        // another connection) answers this exec instead of starting a second one.
        let mut entries = self.entries.lock();
        if let Some(existing) = entries.get(&id) {
            return Ok(existing.record.status());
        }
        let counters = metrics.as_ref().map(|m| m.counters());
        let record = self.new_record(&id, meta, counters)?;
        let sink = Arc::new(LogSink {
            record: Arc::clone(&record),
            stdout: Mutex::new(redactor.clone()),
            stderr: Mutex::new(redactor.clone()),
            report: redactor,
            metrics,
        });
        let exec = self.supervisor.spawn(spec, sink);
        let _ = record.exec.set(exec.clone());
        let (input_tx, input_rx) = mpsc::unbounded_channel();
        tokio::spawn(super::io::pump_input(exec.clone(), input_rx));
        let announcer = Arc::clone(&record);
        let pruner = self.pruner();
        tokio::spawn(async move {
            exec.started().await;
            announcer.announce();
            // Once it has ended (and its end is recorded), older ended execs may have to go.
            exec.wait().await;
            let _ = tokio::task::spawn_blocking(move || pruner.prune()).await;
        });
        entries.insert(
            id.clone(),
            Entry {
                record: Arc::clone(&record),
                input: Some(input_tx),
            },
        );
        drop(entries);
        tracing::info!(exec_id = %id, "exec started");
        Ok(record.status())
    }

    fn new_record(
        &self,
        id: &str,
        meta: ExecMeta,
        reported: Option<Arc<ReportCounters>>,
    ) -> Result<Arc<ExecRecord>, ErrorBody> {
        let dir = self.dir.join(id);
        std::fs::create_dir_all(&dir).map_err(|e| internal("cannot create an exec record", e))?;
        meta.save(&dir)
            .map_err(|e| internal("cannot write an exec record", e))?;
        let log = ExecLog::create(&dir.join("log"), &self.config, &self.budget)
            .map_err(|e| internal("cannot create an exec log", e))?;
        let record = ExecRecord::new(id.to_owned(), dir, log, meta).reporting(reported);
        Ok(Arc::new(record))
    }

    /// Cancels the exec. An id never started is recorded as cancelled, so a later
    /// `exec.start` with it answers that record and never runs its command.
    pub(crate) fn cancel(&self, cancel: CancelRequest) -> Result<Value, ErrorBody> {
        let CancelRequest { exec_id: id, grace } = cancel;
        let mut entries = self.entries.lock();
        if let Some(entry) = entries.get(&id) {
            if let Some(exec) = entry.record.exec.get() {
                match grace {
                    Some(grace) => exec.cancel_with_grace(grace),
                    None => exec.cancel(),
                }
                tracing::info!(exec_id = %id, "exec cancel requested");
            }
            return Ok(entry.record.status());
        }
        let record = self.new_record(&id, ExecMeta::starting(&id), None)?;
        record.conclude("cancelled", None, None, None, None);
        tracing::info!(exec_id = %id, "exec cancelled before it was started");
        let status = record.status();
        entries.insert(
            id,
            Entry {
                record,
                input: None,
            },
        );
        drop(entries);
        self.pruner().prune();
        Ok(status)
    }

    /// Queues stdin for the exec in request order; the future resolves once it is written.
    pub(crate) fn input(
        &self,
        input: InputRequest,
    ) -> Result<oneshot::Receiver<Result<usize, ErrorBody>>, ErrorBody> {
        let InputRequest { exec_id, data, eof } = input;
        let entries = self.entries.lock();
        let entry = entries
            .get(&exec_id)
            .ok_or_else(|| ErrorBody::new(ErrorCode::NotFound, format!("no exec '{exec_id}'")))?;
        let closed = || {
            ErrorBody::new(
                ErrorCode::Conflict,
                "this exec does not take input: it has ended or was run by an earlier agent",
            )
        };
        let tx = entry.input.as_ref().ok_or_else(closed)?;
        let (reply, rx) = oneshot::channel();
        tx.send(InputJob { data, eof, reply })
            .map_err(|_| closed())?;
        Ok(rx)
    }

    /// Resizes the exec's terminal and records its new size (its status's `pty`); refused
    /// (conflict) for an exec without a terminal, one that has ended, or an earlier daemon's.
    pub(crate) fn resize(&self, resize: ResizeRequest) -> Result<Value, ErrorBody> {
        let ResizeRequest { exec_id, size } = resize;
        let record = self.record(&exec_id)?;
        let conflict = |why: &str| ErrorBody::new(ErrorCode::Conflict, why);
        if record.meta.lock().pty.is_none() {
            return Err(conflict(
                "this exec has no terminal to resize: start it with 'pty' to get one",
            ));
        }
        if is_final(&record.state()) {
            return Err(conflict("this exec has ended: its terminal is gone"));
        }
        let exec = record
            .exec
            .get()
            .ok_or_else(|| conflict("this exec is not running here"))?;
        exec.resize(size)
            .map_err(|e| ErrorBody::new(ErrorCode::Conflict, e.to_string()))?;
        record.resized(size);
        Ok(json!({"exec_id": exec_id, "rows": size.rows, "cols": size.cols}))
    }

    pub(crate) fn read(&self, read: ReadRequest) -> Result<PageRead, ErrorBody> {
        Ok(PageRead {
            record: self.record(&read.exec_id)?,
            request: read,
        })
    }

    /// Every exec's record, oldest first.
    fn records_by_age(&self) -> Vec<Arc<ExecRecord>> {
        let mut records: Vec<Arc<ExecRecord>> = self
            .entries
            .lock()
            .values()
            .map(|e| Arc::clone(&e.record))
            .collect();
        records.sort_by_key(|r| (r.meta.lock().created_ms, r.id.clone()));
        records
    }

    /// The execs newest first, without the gateway's internal ones.
    pub(crate) fn list(&self) -> Value {
        Value::Array(
            self.records_by_age()
                .iter()
                .rev()
                .filter(|r| !r.meta.lock().internal)
                .map(|r| r.status())
                .collect(),
        )
    }

    /// The execs whose notes the gateway has not settled, oldest first (see `ExecMeta::note`).
    pub(crate) fn open_notes(&self) -> Value {
        Value::Array(
            self.records_by_age()
                .iter()
                .filter_map(|r| r.open_note())
                .collect(),
        )
    }

    /// Marks `exec_id`'s note settled; an exec without one (or pruned) is no error.
    pub(crate) fn settle_note(&self, id: &str) -> Value {
        if let Some(entry) = self.entries.lock().get(id) {
            entry.record.settle_note();
        }
        serde_json::json!({"exec_id": id, "settled": true})
    }

    /// Every running exec, for shutdown.
    pub(crate) fn running(&self) -> Vec<Arc<ExecRecord>> {
        self.entries
            .lock()
            .values()
            .filter(|e| !super::meta::is_final(&e.record.state()))
            .map(|e| Arc::clone(&e.record))
            .collect()
    }
}
