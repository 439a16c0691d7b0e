//! How one step of an `exec.start` request becomes a process spec and its record: the command,
//! the identity it runs as, its environment (values redacted in the record), its working
//! directory (inside the workspace, or the agent's own for an agent step) and, for an agent
//! step, the credential its git gets through the askpass socket.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::args::{policy, Args};
use super::askpass::{Credential, Credentials};
use super::meta::StepMeta;
use crate::agent::process::{ExecSpec, Identity, PidSlot, Redactor};
use crate::channel::message::ErrorBody;
use crate::policy;

pub(crate) struct StepRules {
    /// The workspace root every workspace step's `workdir` is contained in.
    root: String,
    /// The working directory (and HOME) of agent-identity steps: outside the workspace.
    pub(crate) agent_home: PathBuf,
    /// The tokens of running authenticated steps, answered on the askpass socket.
    pub(crate) credentials: Arc<Credentials>,
    /// What a step with a `credential` gets in its environment to reach that socket.
    pub(crate) askpass_env: Vec<(OsString, OsString)>,
}

pub(crate) fn redact_text(redactor: &Redactor, text: &str) -> String {
    let mut r = redactor.clone();
    let mut out = r.push(text.as_bytes());
    out.extend(r.finish());
    String::from_utf8_lossy(&out).into_owned()
}

impl StepRules {
    pub(crate) fn new(root: String) -> Self {
        Self {
            root,
            agent_home: PathBuf::from("/nonexistent"),
            credentials: Arc::default(),
            askpass_env: Vec::new(),
        }
    }

    /// One step's spec and its record (values redacted); `prefix` names it in errors.
    pub(crate) fn step(
        &self,
        step: &Map<String, Value>,
        prefix: &str,
        redactor: &Redactor,
    ) -> Result<(ExecSpec, StepMeta), ErrorBody> {
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
        let mut spec = match (a.str("command")?, a.strings("argv")?) {
            (Some(text), None) => ExecSpec::shell(text),
            (None, Some(argv)) if !argv.is_empty() => ExecSpec::argv(argv),
            _ => return Err(ErrorBody::invalid(
                &field("command"),
                "give exactly one of 'command' (text for bash -lc) or 'argv' (a non-empty list)",
            )),
        };
        spec.identity = identity;
        let mut env = Vec::new();
        for (name, value) in a.object("env")?.into_iter().flatten() {
            let name = policy::env_name(name).map_err(|e| policy(&field("env"), e))?;
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
            spec.env
                .push((OsString::from(&name), OsString::from(value)));
            env.push((name, redact_text(redactor, value)));
        }
        if let Some(credential) = a.object("credential")? {
            spec.pid_slot = Some(self.credential(credential, identity, &field("credential"))?);
            spec.env.extend(self.askpass_env.iter().cloned());
        }
        let workdir = match (identity, a.str("workdir")?) {
            (Identity::Agent, Some(_)) => {
                return Err(ErrorBody::invalid(
                    &field("workdir"),
                    "an agent step runs in the agent's own directory: give no 'workdir'",
                ))
            }
            (_, Some(dir)) => Some(
                policy::workspace_path(&self.root, dir)
                    .map_err(|e| policy(&field("workdir"), e))?,
            ),
            (_, None) => None,
        };
        spec.workdir = Some(match identity {
            // Never a directory the workspace can write while the step runs.
            Identity::Agent => self.agent_home.clone(),
            Identity::Workspace => PathBuf::from(workdir.as_deref().unwrap_or(&self.root)),
        });
        let meta = StepMeta {
            identity: identity.as_str().to_owned(),
            command: a.str("command")?.map(|t| redact_text(redactor, t)),
            argv: a
                .strings("argv")?
                .map(|v| v.iter().map(|s| redact_text(redactor, s)).collect()),
            env,
            workdir,
        };
        Ok((spec, meta))
    }

    /// A step's `{"base": "scheme://host[:port]", "token": "…"}`: the token stays here, and
    /// the step's git gets it through the askpass socket (see `askpass`), for that base alone.
    fn credential(
        &self,
        credential: &Map<String, Value>,
        identity: Identity,
        field: &str,
    ) -> Result<Arc<PidSlot>, ErrorBody> {
        if identity != Identity::Agent {
            return Err(ErrorBody::invalid(
                field,
                "only an agent step may hold a credential",
            ));
        }
        if self.askpass_env.is_empty() {
            return Err(ErrorBody::invalid(
                field,
                "this agent has no askpass socket: it cannot hand out a credential",
            ));
        }
        let a = Args(credential);
        let base = a
            .str("base")?
            .ok_or_else(|| ErrorBody::invalid(field, "a credential needs its 'base'"))?;
        let token = a
            .str("token")?
            .ok_or_else(|| ErrorBody::invalid(field, "a credential needs its 'token'"))?;
        let credential = Credential::new(base, token.to_owned())
            .map_err(|message| ErrorBody::invalid(field, message))?;
        Ok(self.credentials.grant(credential))
    }
}
