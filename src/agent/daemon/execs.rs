//! The exec registry: starting execs from validated requests, stdin in request order, cancel
//! (also before start), resize, status, listing, and the records of earlier daemons.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::args::{internal, policy, Args};
use super::askpass::Credentials;
use super::exec_io::InputJob;
use super::exec_steps::StepRules;
use super::meta::{ExecMeta, PtyMeta};
use super::prune::Pruner;
use super::record::{ExecRecord, LogSink};
use crate::agent::exec_log::{ExecLog, LogBudget, LogConfig};
use crate::agent::process::{Redactor, Supervisor, DEFAULT_KILL_GRACE};
use crate::channel::message::{ErrorBody, ErrorCode};
use crate::policy;

pub(super) struct Entry {
    pub(super) record: Arc<ExecRecord>,
    /// Stdin jobs of this exec, written by one task in order; `None` when it never ran here.
    pub(super) input: Option<mpsc::UnboundedSender<InputJob>>,
}

/// The most steps one exec may have.
const MAX_STEPS: usize = 8;
/// The largest note the gateway may keep with an exec.
const MAX_NOTE_BYTES: usize = 16 * 1024;

pub(crate) struct ExecRegistry {
    dir: PathBuf,
    /// How each step of a request becomes a spec (paths, identities, credentials).
    steps: StepRules,
    supervisor: Supervisor,
    config: LogConfig,
    budget: Arc<LogBudget>,
    /// Secret values every exec inherits from the daemon's environment: redacted from all.
    inherited_secrets: Vec<String>,
    pub(super) entries: Arc<Mutex<HashMap<String, Entry>>>,
    /// How many ended execs are kept (see `prune`).
    max_ended: usize,
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
        }
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
        std::fs::create_dir_all(&self.dir)?;
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
        let id = policy::check_id("ex", id).map_err(|e| policy("exec_id", e))?;
        self.entries
            .lock()
            .get(&id)
            .map(|e| Arc::clone(&e.record))
            .ok_or_else(|| ErrorBody::new(ErrorCode::NotFound, format!("no exec '{id}'")))
    }

    /// Starts an exec, or answers the existing one when `exec_id` names it already.
    ///
    /// Either one command (`command` or `argv`, `env`, `workdir`) or `steps`: a list of step
    /// objects, each with `command` or `argv`, `env`, `identity` (`"workspace"`, the default, or
    /// `"agent"`) and, for a workspace step, `workdir`; each step runs only after the previous
    /// one exited 0, in the one event stream. `secrets`, `pty`, `timeout_seconds` and
    /// `kill_grace_seconds` are the exec's.
    pub(crate) fn start(&self, args: &Map<String, Value>) -> Result<Value, ErrorBody> {
        let a = Args(args);
        let id = match a.str("exec_id")? {
            Some(id) => policy::check_id("ex", id).map_err(|e| policy("exec_id", e))?,
            None => policy::new_id("ex").map_err(|e| internal("cannot make an exec id", e))?,
        };
        if let Some(existing) = self.entries.lock().get(&id) {
            return Ok(existing.record.status());
        }
        if a.object("secret_env")?.is_some() {
            return Err(ErrorBody::invalid(
                "secret_env",
                "'secret_env' is no longer served: the agent holds no secrets; send the value \
                 in the 'env' of the one step that needs it (with its value in 'secrets')",
            ));
        }
        let secrets = a.strings("secrets")?.unwrap_or_default();
        let redactor = Redactor::new(secrets.iter().chain(&self.inherited_secrets));
        let steps: Vec<(&Map<String, Value>, String)> = match a.get_array("steps")? {
            None => vec![(args, String::new())],
            Some(list) if !list.is_empty() && list.len() <= MAX_STEPS => list
                .iter()
                .enumerate()
                .map(|(i, step)| match step {
                    Value::Object(step) => Ok((step, format!("steps[{i}]."))),
                    _ => Err(ErrorBody::invalid("steps", "every step must be an object")),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(ErrorBody::invalid(
                    "steps",
                    format!("'steps' must list 1 to {MAX_STEPS} steps"),
                ))
            }
        };
        if steps.len() > 1 || a.get_array("steps")?.is_some() {
            for name in ["command", "argv", "env", "workdir", "identity"] {
                if args.get(name).is_some_and(|v| !v.is_null()) {
                    return Err(ErrorBody::invalid(
                        name,
                        format!("give '{name}' inside each step when 'steps' is given"),
                    ));
                }
            }
        }
        let mut specs = Vec::new();
        let mut step_metas = Vec::new();
        for (step, prefix) in &steps {
            let (spec, meta) = self.steps.step(step, prefix, &redactor)?;
            specs.push(spec);
            step_metas.push(meta);
        }
        let pty = match a.object("pty")? {
            Some(p) => {
                let size = |name: &str| -> Result<u16, ErrorBody> {
                    Args(p)
                        .u64(name)?
                        .and_then(|n| u16::try_from(n).ok())
                        .filter(|&n| n > 0)
                        .ok_or_else(|| {
                            ErrorBody::invalid("pty", format!("pty.{name} must be 1 to 65535"))
                        })
                };
                Some(PtyMeta {
                    rows: size("rows")?,
                    cols: size("cols")?,
                })
            }
            None => None,
        };
        if pty.is_some() && steps.len() > 1 {
            return Err(ErrorBody::invalid(
                "pty",
                "a terminal is for one command: give 'pty' without 'steps'",
            ));
        }
        let timeout = a.seconds("timeout_seconds")?.filter(|t| !t.is_zero());
        let kill_grace = a
            .seconds("kill_grace_seconds")?
            .unwrap_or(DEFAULT_KILL_GRACE);
        let mut specs = specs.into_iter().rev();
        let Some(mut spec) = specs.next() else {
            return Err(ErrorBody::invalid("steps", "give at least one step"));
        };
        for earlier in specs {
            spec = earlier.then(spec);
        }
        spec.pty = pty.map(|p| crate::agent::process::PtySize {
            rows: p.rows,
            cols: p.cols,
        });
        spec.timeout = timeout;
        spec.kill_grace = kill_grace;
        let single = a.get_array("steps")?.is_none();
        let first = step_metas.first().cloned().unwrap_or_default();

        let note = match a.object("note")? {
            Some(note) => {
                let note = Value::Object(note.clone());
                if note.to_string().len() > MAX_NOTE_BYTES {
                    return Err(ErrorBody::invalid(
                        "note",
                        format!("'note' must be at most {MAX_NOTE_BYTES} bytes of JSON"),
                    ));
                }
                Some(note)
            }
            None => None,
        };
        let meta = ExecMeta {
            note,
            command: if single { first.command } else { None },
            argv: if single { first.argv } else { None },
            env: if single { first.env } else { Vec::new() },
            workdir: if single { first.workdir } else { None },
            steps: if single { Vec::new() } else { step_metas },
            pty,
            timeout_seconds: spec.timeout.map(|t| t.as_secs_f64()),
            kill_grace_seconds: spec.kill_grace.as_secs_f64(),
            secrets: secrets.len(),
            ..ExecMeta::starting(&id)
        };
        // Checked again and created under the lock, so a racing start of the same id (from
        // another connection) answers this exec instead of starting a second one.
        let mut entries = self.entries.lock();
        if let Some(existing) = entries.get(&id) {
            return Ok(existing.record.status());
        }
        let record = self.new_record(&id, meta)?;
        let sink = Arc::new(LogSink {
            record: Arc::clone(&record),
            stdout: Mutex::new(redactor.clone()),
            stderr: Mutex::new(redactor),
        });
        let exec = self.supervisor.spawn(spec, sink);
        let _ = record.exec.set(exec.clone());
        let (input_tx, input_rx) = mpsc::unbounded_channel();
        tokio::spawn(super::exec_io::pump_input(exec.clone(), input_rx));
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

    fn new_record(&self, id: &str, meta: ExecMeta) -> Result<Arc<ExecRecord>, ErrorBody> {
        let dir = self.dir.join(id);
        std::fs::create_dir_all(&dir).map_err(|e| internal("cannot create an exec record", e))?;
        meta.save(&dir)
            .map_err(|e| internal("cannot write an exec record", e))?;
        let log = ExecLog::create(&dir.join("log"), &self.config, &self.budget)
            .map_err(|e| internal("cannot create an exec log", e))?;
        Ok(Arc::new(ExecRecord::new(id.to_owned(), dir, log, meta)))
    }

    /// Cancels `exec_id`. An id never started is recorded as cancelled, so a later `exec.start`
    /// with it answers that record and never runs its command.
    pub(crate) fn cancel(&self, args: &Map<String, Value>) -> Result<Value, ErrorBody> {
        let a = Args(args);
        let id =
            policy::check_id("ex", a.required_str("exec_id")?).map_err(|e| policy("exec_id", e))?;
        let grace = a.seconds("grace_seconds")?;
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
        let record = self.new_record(&id, ExecMeta::starting(&id))?;
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

    pub(crate) fn list(&self) -> Value {
        Value::Array(
            self.records_by_age()
                .iter()
                .rev()
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
    pub(crate) fn settle_note(&self, args: &Map<String, Value>) -> Result<Value, ErrorBody> {
        let id = policy::check_id("ex", Args(args).required_str("exec_id")?)
            .map_err(|e| policy("exec_id", e))?;
        if let Some(entry) = self.entries.lock().get(&id) {
            entry.record.settle_note();
        }
        Ok(serde_json::json!({"exec_id": id, "settled": true}))
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
