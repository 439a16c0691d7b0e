//! The exec ops' requests: ids checked, steps, terminal sizes, durations and notes read into
//! types; what needs the daemon's state (paths under its root, credentials) is left to it.

use std::time::Duration;

use serde_json::{Map, Value};

use super::args::{policy, Args};
use crate::agent::process::{Identity, PtySize, DEFAULT_KILL_GRACE};
use crate::channel::message::ErrorBody;
use crate::policy as rules;
use crate::ring::MAX_PAGE_EVENTS;

/// The most steps one exec may have.
const MAX_STEPS: usize = 8;
/// The largest note the gateway may keep with an exec.
const MAX_NOTE_BYTES: usize = 16 * 1024;
/// The longest an `exec.read` long-polls.
const MAX_READ_WAIT: Duration = Duration::from_secs(25);
/// The largest terminal an exec may ask for, in rows and columns: beyond any screen, and small
/// enough that a full-screen program's redraw stays a few events.
pub(crate) const MAX_PTY_ROWS: u64 = 500;
pub(crate) const MAX_PTY_COLS: u64 = 1000;

/// A terminal size from `a`'s `rows` and `cols`; errors name the field as `{prefix}rows`.
fn pty_size(a: &Args<'_>, prefix: &str) -> Result<PtySize, ErrorBody> {
    let cells = |name: &str, max: u64| -> Result<u16, ErrorBody> {
        let field = format!("{prefix}{name}");
        let refused = || ErrorBody::invalid(&field, format!("'{field}' must be 1 to {max}"));
        let n = a.u64(name).map_err(|_| refused())?.ok_or_else(refused)?;
        match u16::try_from(n) {
            Ok(n) if (1..=max).contains(&u64::from(n)) => Ok(n),
            _ => Err(refused()),
        }
    };
    Ok(PtySize {
        rows: cells("rows", MAX_PTY_ROWS)?,
        cols: cells("cols", MAX_PTY_COLS)?,
    })
}

/// The required `exec_id`, checked.
pub(crate) fn exec_id(a: &Args<'_>) -> Result<String, ErrorBody> {
    rules::check_id("ex", a.required_str("exec_id")?).map_err(|e| policy("exec_id", e))
}

/// What a step runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StepProgram {
    /// Text for `bash -lc`.
    Shell(String),
    Argv(Vec<String>),
}

/// A step's `credential`, as given (the daemon checks its base when it grants it).
#[derive(Debug, Clone)]
pub(crate) struct StepCredential {
    pub(crate) base: String,
    pub(crate) token: String,
}

/// One step of an `exec.start` (the request itself when it gives no `steps`).
#[derive(Debug, Clone)]
pub(crate) struct StepRequest {
    /// What names this step's fields in errors: `""` or `steps[N].`.
    pub(crate) prefix: String,
    pub(crate) identity: Identity,
    pub(crate) program: StepProgram,
    /// Names checked by the policy, values free of NUL.
    pub(crate) env: Vec<(String, String)>,
    pub(crate) credential: Option<StepCredential>,
    /// As given, for a workspace step (the daemon contains it under its root).
    pub(crate) workdir: Option<String>,
    /// An agent step's report channel (`ExecSpec::report`): what it writes there is the exec's
    /// `report`, which no other step and no process of the workspace can write to.
    pub(crate) report: bool,
}

impl StepRequest {
    pub(crate) fn field(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    fn parse(step: &Map<String, Value>, prefix: String) -> Result<Self, ErrorBody> {
        let a = Args(step);
        let field = |name: &str| format!("{prefix}{name}");
        let identity = match a.str("identity")? {
            None | Some("workspace") => Identity::Workspace,
            Some("agent") => Identity::Agent,
            Some(_) => {
                return Err(ErrorBody::invalid(
                    &field("identity"),
                    "'identity' must be \"workspace\" or \"agent\"",
                ))
            }
        };
        let program = match (a.str("command")?, a.strings("argv")?) {
            (Some(text), None) => StepProgram::Shell(text.to_owned()),
            (None, Some(argv)) if !argv.is_empty() => StepProgram::Argv(argv),
            _ => return Err(ErrorBody::invalid(
                &field("command"),
                "give exactly one of 'command' (text for bash -lc) or 'argv' (a non-empty list)",
            )),
        };
        let mut env = Vec::new();
        for (name, value) in a.object("env")?.into_iter().flatten() {
            let name = rules::env_name(name).map_err(|e| policy(&field("env"), e))?;
            let Some(value) = value.as_str() else {
                return Err(ErrorBody::invalid(
                    &field("env"),
                    "every 'env' value must be a string",
                ));
            };
            if value.contains('\0') {
                return Err(ErrorBody::invalid(
                    &field("env"),
                    "an 'env' value must not contain NUL",
                ));
            }
            env.push((name, value.to_owned()));
        }
        let credential = match a.object("credential")? {
            None => None,
            Some(credential) => Some(Self::credential(
                credential,
                identity,
                &field("credential"),
            )?),
        };
        let workdir = match (identity, a.str("workdir")?) {
            (Identity::Agent, Some(_)) => {
                return Err(ErrorBody::invalid(
                    &field("workdir"),
                    "an agent step runs in the agent's own directory: give no 'workdir'",
                ))
            }
            (_, dir) => dir.map(str::to_owned),
        };
        let report = a.bool("report")?;
        if report && identity != Identity::Agent {
            // A workspace step's processes are the workspace's: its other processes can reach
            // their descriptors, so a report from there would be theirs to write.
            return Err(ErrorBody::invalid(
                &field("report"),
                "only an agent step has a report channel",
            ));
        }
        Ok(Self {
            prefix,
            identity,
            program,
            env,
            credential,
            workdir,
            report,
        })
    }

    fn credential(
        credential: &Map<String, Value>,
        identity: Identity,
        field: &str,
    ) -> Result<StepCredential, ErrorBody> {
        if identity != Identity::Agent {
            return Err(ErrorBody::invalid(
                field,
                "only an agent step may hold a credential",
            ));
        }
        let a = Args(credential);
        let base = a
            .str("base")?
            .ok_or_else(|| ErrorBody::invalid(field, "a credential needs its 'base'"))?;
        let token = a
            .str("token")?
            .ok_or_else(|| ErrorBody::invalid(field, "a credential needs its 'token'"))?;
        Ok(StepCredential {
            base: base.to_owned(),
            token: token.to_owned(),
        })
    }
}

/// An `exec.start`: one command (`command` or `argv`, `env`, `workdir`) or `steps`, and what
/// belongs to the exec as a whole.
#[derive(Debug)]
pub(crate) struct StartRequest {
    /// The gateway's id for the exec (a start of an id already known answers that exec).
    pub(crate) exec_id: Option<String>,
    pub(crate) steps: Vec<StepRequest>,
    /// Whether the request gave `steps` (then its record lists them, even just one).
    pub(crate) as_steps: bool,
    /// Values to redact from everything recorded.
    pub(crate) secrets: Vec<String>,
    pub(crate) pty: Option<PtySize>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) kill_grace: Duration,
    pub(crate) note: Option<Value>,
    /// The gateway's own exec (git for a repo status or diff): left out of `exec.list`.
    pub(crate) internal: bool,
    /// Tee the `::metric` lines of its output into the workspace's metrics stream.
    pub(crate) report_metrics: bool,
}

impl StartRequest {
    pub(crate) fn parse(args: &Map<String, Value>) -> Result<Self, ErrorBody> {
        let a = Args(args);
        let exec_id = match a.str("exec_id")? {
            Some(id) => Some(rules::check_id("ex", id).map_err(|e| policy("exec_id", e))?),
            None => None,
        };
        if a.object("secret_env")?.is_some() {
            return Err(ErrorBody::invalid(
                "secret_env",
                "'secret_env' is no longer served: the agent holds no secrets; send the value \
                 in the 'env' of the one step that needs it (with its value in 'secrets')",
            ));
        }
        let secrets = a.strings("secrets")?.unwrap_or_default();
        let listed = a.get_array("steps")?;
        let steps = match listed {
            None => vec![StepRequest::parse(args, String::new())?],
            Some(list) if !list.is_empty() && list.len() <= MAX_STEPS => {
                for name in ["command", "argv", "env", "workdir", "identity"] {
                    if args.get(name).is_some_and(|v| !v.is_null()) {
                        return Err(ErrorBody::invalid(
                            name,
                            format!("give '{name}' inside each step when 'steps' is given"),
                        ));
                    }
                }
                let objects = list
                    .iter()
                    .map(|step| match step {
                        Value::Object(step) => Ok(step),
                        _ => Err(ErrorBody::invalid("steps", "every step must be an object")),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                objects
                    .into_iter()
                    .enumerate()
                    .map(|(i, step)| StepRequest::parse(step, format!("steps[{i}].")))
                    .collect::<Result<Vec<_>, _>>()?
            }
            Some(_) => {
                return Err(ErrorBody::invalid(
                    "steps",
                    format!("'steps' must list 1 to {MAX_STEPS} steps"),
                ))
            }
        };
        if let Some(second) = steps.iter().filter(|step| step.report).nth(1) {
            return Err(ErrorBody::invalid(
                &second.field("report"),
                "an exec has one report: give 'report' to one step",
            ));
        }
        let pty = match a.object("pty")? {
            Some(p) => Some(pty_size(&Args(p), "pty.")?),
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
        let internal = a.bool("internal")?;
        if internal && (pty.is_some() || note.is_some() || steps.len() > 1) {
            // What the gateway runs for itself is one command it drains to its end: an exec
            // that a caller follows or that records something must stay listed.
            return Err(ErrorBody::invalid(
                "internal",
                "an internal exec is one command without 'pty', 'note' or several 'steps'",
            ));
        }
        Ok(Self {
            exec_id,
            steps,
            as_steps: listed.is_some(),
            secrets,
            pty,
            timeout,
            kill_grace,
            note,
            internal,
            report_metrics: a.bool("report_metrics")?,
        })
    }
}

/// An `exec.input`: bytes for stdin, then (with `eof`) its end.
#[derive(Debug)]
pub(crate) struct InputRequest {
    pub(crate) exec_id: String,
    pub(crate) data: Vec<u8>,
    pub(crate) eof: bool,
}

impl InputRequest {
    pub(crate) fn parse(a: &Args<'_>, data: Vec<u8>) -> Result<Self, ErrorBody> {
        Ok(Self {
            exec_id: exec_id(a)?,
            eof: a.bool("eof")?,
            data,
        })
    }
}

#[derive(Debug)]
pub(crate) struct CancelRequest {
    pub(crate) exec_id: String,
    /// TERM → KILL delay for this cancel, instead of the exec's own.
    pub(crate) grace: Option<Duration>,
}

impl CancelRequest {
    pub(crate) fn parse(a: &Args<'_>) -> Result<Self, ErrorBody> {
        Ok(Self {
            exec_id: exec_id(a)?,
            grace: a.seconds("grace_seconds")?,
        })
    }
}

#[derive(Debug)]
pub(crate) struct ResizeRequest {
    pub(crate) exec_id: String,
    pub(crate) size: PtySize,
}

impl ResizeRequest {
    pub(crate) fn parse(a: &Args<'_>) -> Result<Self, ErrorBody> {
        Ok(Self {
            exec_id: exec_id(a)?,
            size: pty_size(a, "")?,
        })
    }
}

#[derive(Debug)]
pub(crate) struct StatusRequest {
    pub(crate) exec_id: String,
    /// Also what ran, redacted.
    pub(crate) command: bool,
    /// Also the report of its step with a report channel.
    pub(crate) report: bool,
}

impl StatusRequest {
    pub(crate) fn parse(a: &Args<'_>) -> Result<Self, ErrorBody> {
        Ok(Self {
            exec_id: exec_id(a)?,
            command: a.bool("command")?,
            report: a.bool("report")?,
        })
    }
}

/// An `exec.read`: one page from `cursor`, long-polled up to `wait`.
#[derive(Debug)]
pub(crate) struct ReadRequest {
    pub(crate) exec_id: String,
    pub(crate) cursor: u64,
    pub(crate) max_events: usize,
    pub(crate) max_bytes: usize,
    /// Long-poll this long for an event after the cursor (at most 25 s).
    pub(crate) wait: Option<Duration>,
}

impl ReadRequest {
    pub(crate) fn parse(a: &Args<'_>) -> Result<Self, ErrorBody> {
        Ok(Self {
            exec_id: exec_id(a)?,
            cursor: a.u64("cursor")?.unwrap_or(0),
            max_events: a.usize("max_events", MAX_PAGE_EVENTS)?.max(1),
            max_bytes: a.usize("max_bytes", 64 * 1024)?,
            wait: a.seconds("wait_seconds")?.map(|w| w.min(MAX_READ_WAIT)),
        })
    }
}
