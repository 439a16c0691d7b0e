//! The daemon's own environment as workspace commands see it. A provider that still names
//! private variables in `MWC_PRIVATE_ENV` (an older gateway's sandbox) gets them withheld from
//! every exec, and the daemon keeps no lookup of them: a secret a single step needs arrives in
//! that step's request (`env` of an agent-identity step), never from the daemon's environment.

use std::ffi::OsString;

/// Comma-separated names of the daemon's variables that execs do not inherit.
pub(crate) const PRIVATE_ENV: &str = "MWC_PRIVATE_ENV";

/// The daemon's environment without `MWC_PRIVATE_ENV` and every variable it names.
pub(crate) fn workspace_env(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
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
    vars.into_iter()
        .filter(|(key, _)| {
            let name = key.to_str();
            !name.is_some_and(|n| n == PRIVATE_ENV || private.iter().any(|p| p == n))
        })
        .collect()
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
    fn test_private_variables_are_withheld_from_execs() {
        let inherited = workspace_env(env(&[
            ("PATH", "/bin"),
            ("GH_TOKEN", "tok"),
            ("OTHER", "x"),
            (PRIVATE_ENV, "GH_TOKEN, MISSING"),
        ]));
        assert_eq!(inherited, env(&[("PATH", "/bin"), ("OTHER", "x")]));
    }

    #[test]
    fn test_without_the_setting_every_variable_is_inherited() {
        let inherited = workspace_env(env(&[("GH_TOKEN", "tok")]));
        assert_eq!(inherited, env(&[("GH_TOKEN", "tok")]));
    }
}
