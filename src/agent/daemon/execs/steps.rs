//! How one checked step of an `exec.start` request becomes a process spec and its record: the command,
//! the identity it runs as, its environment (values redacted in the record), its working
//! directory (inside the workspace, or the agent's own for an agent step) and, for an agent
//! step, the credential its git gets through the askpass socket.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use super::meta::StepMeta;
use crate::agent::daemon::askpass::{Credential, Credentials};
use crate::agent::ops::{policy as policy_error, under_root};
use crate::agent::ops::{StepCredential, StepProgram, StepRequest};
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

    /// One step's spec and its record (values redacted).
    pub(crate) fn step(
        &self,
        step: &StepRequest,
        redactor: &Redactor,
    ) -> Result<(ExecSpec, StepMeta), ErrorBody> {
        let identity = step.identity;
        let mut spec = match &step.program {
            StepProgram::Shell(text) => ExecSpec::shell(text),
            StepProgram::Argv(argv) => ExecSpec::argv(argv.clone()),
        };
        spec.identity = identity;
        spec.report = step.report;
        let mut env = Vec::new();
        for (name, value) in &step.env {
            spec.env.push((OsString::from(name), OsString::from(value)));
            env.push((name.clone(), redact_text(redactor, value)));
        }
        if let Some(credential) = &step.credential {
            spec.pid_slot = Some(self.credential(credential, &step.field("credential"))?);
            spec.env.extend(self.askpass_env.iter().cloned());
        }
        let workdir = match &step.workdir {
            Some(dir) => Some(
                policy::workspace_path(&self.root, &under_root(dir))
                    .map_err(|e| policy_error(&step.field("workdir"), e))?,
            ),
            None => None,
        };
        spec.workdir = Some(match identity {
            // Never a directory the workspace can write while the step runs.
            Identity::Agent => self.agent_home.clone(),
            Identity::Workspace => PathBuf::from(workdir.as_deref().unwrap_or(&self.root)),
        });
        let (command, argv) = match &step.program {
            StepProgram::Shell(text) => (Some(redact_text(redactor, text)), None),
            StepProgram::Argv(argv) => (
                None,
                Some(argv.iter().map(|s| redact_text(redactor, s)).collect()),
            ),
        };
        let meta = StepMeta {
            identity: identity.as_str().to_owned(),
            command,
            argv,
            env,
            workdir,
            report: step.report,
        };
        Ok((spec, meta))
    }

    /// A step's credential (only an agent step has one, see [`StepRequest`]): the token stays
    /// here, and the step's git gets it through the askpass socket (see `askpass`), for that
    /// base alone.
    fn credential(
        &self,
        credential: &StepCredential,
        field: &str,
    ) -> Result<Arc<PidSlot>, ErrorBody> {
        if self.askpass_env.is_empty() {
            return Err(ErrorBody::invalid(
                field,
                "this agent has no askpass socket: it cannot hand out a credential",
            ));
        }
        let credential = Credential::new(&credential.base, credential.token.clone())
            .map_err(|message| ErrorBody::invalid(field, message))?;
        Ok(self.credentials.grant(credential))
    }
}
