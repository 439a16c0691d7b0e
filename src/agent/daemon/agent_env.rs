//! The daemon's own environment as execs see it: variables named in `MWC_PRIVATE_ENV` (secrets
//! a provider put in the workspace) are withheld from every exec unless a request asks for one.

use std::collections::HashMap;
use std::ffi::OsString;

use crate::channel::message::{ErrorBody, ErrorCode};

/// Comma-separated names of the daemon's variables that execs do not inherit.
pub(crate) const PRIVATE_ENV: &str = "MWC_PRIVATE_ENV";

/// The daemon's variables, for `secret_env` lookups; the private ones are kept only here.
#[derive(Debug, Default, Clone)]
pub(crate) struct AgentEnv {
    vars: HashMap<String, String>,
}

impl AgentEnv {
    /// Splits the daemon's environment into what every exec inherits and the lookup table.
    /// `MWC_PRIVATE_ENV` itself and every variable it names are left out of the inherited part.
    pub(crate) fn split(
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> (Vec<(OsString, OsString)>, Self) {
        let vars: Vec<(OsString, OsString)> = vars.into_iter().collect();
        let private: Vec<String> = vars
            .iter()
            .find(|(k, _)| k == PRIVATE_ENV)
            .and_then(|(_, v)| v.to_str())
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let mut lookup = HashMap::new();
        let mut inherited = Vec::new();
        for (key, value) in vars {
            let name = key.to_str().map(str::to_owned);
            if let (Some(name), Some(text)) = (&name, value.to_str()) {
                lookup.insert(name.clone(), text.to_owned());
            }
            let hidden = name
                .as_deref()
                .is_some_and(|n| n == PRIVATE_ENV || private.iter().any(|p| p == n));
            if !hidden {
                inherited.push((key, value));
            }
        }
        (inherited, Self { vars: lookup })
    }

    /// The value of the daemon's variable `source`, for the exec variable `target`.
    pub(crate) fn secret(&self, target: &str, source: &str) -> Result<&str, ErrorBody> {
        match self.vars.get(source) {
            Some(value) if !value.is_empty() => Ok(value),
            _ => Err(ErrorBody {
                code: ErrorCode::Permission,
                message: format!(
                    "secret_env.{target}: this workspace holds no secret variable '{source}' \
                     (the secret was not attached when the workspace was created)"
                ),
                field: Some(format!("secret_env.{target}")),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn test_private_variables_are_withheld_from_execs_but_can_be_looked_up() {
        let (inherited, agent) = AgentEnv::split(env(&[
            ("PATH", "/bin"),
            ("GH_TOKEN", "tok"),
            ("OTHER", "x"),
            (PRIVATE_ENV, "GH_TOKEN, MISSING"),
        ]));
        assert_eq!(inherited, env(&[("PATH", "/bin"), ("OTHER", "x")]));
        assert_eq!(agent.secret("MWC_GIT_TOKEN", "GH_TOKEN").ok(), Some("tok"));
        assert_eq!(agent.secret("X", "OTHER").ok(), Some("x"));
    }

    #[test]
    fn test_without_the_setting_every_variable_is_inherited() {
        let (inherited, _) = AgentEnv::split(env(&[("GH_TOKEN", "tok")]));
        assert_eq!(inherited, env(&[("GH_TOKEN", "tok")]));
    }

    #[test]
    fn test_a_missing_or_empty_variable_is_refused_with_the_field_named() {
        let (_, agent) = AgentEnv::split(env(&[("EMPTY", "")]));
        for source in ["EMPTY", "ABSENT"] {
            let err = agent.secret("T", source).unwrap_err();
            assert_eq!(err.code, ErrorCode::Permission);
            assert_eq!(err.field.as_deref(), Some("secret_env.T"));
        }
    }
}
