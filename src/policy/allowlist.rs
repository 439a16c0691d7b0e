//! The operator's allowlist settings as text: which secrets and volumes clients may name, and
//! for a secret the variables it holds, so that their values can be redacted from output.
//!
//! `MODAL_WORKSPACE_ALLOWED_SECRETS` reads `openai:OPENAI_API_KEY:OPENAI_ORG_ID,github`: entries
//! separated by commas, each a Modal object name, optionally followed by `:`-separated variable
//! names. Neither kind of name can hold `:` or `,`, so the form is unambiguous.

use super::error::{echo, PolicyError};
use super::names::{env_name, modal_name};

/// One allowlisted secret: its name, and the variables it holds when the operator listed them
/// (empty: not listed, so its values cannot be redacted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedSecret {
    pub name: String,
    pub keys: Vec<String>,
}

/// The entries of a comma-separated setting, trimmed, without empty ones (a trailing comma or
/// a doubled one is harmless).
fn entries(text: &str) -> impl Iterator<Item = &str> {
    text.split(',').map(str::trim).filter(|e| !e.is_empty())
}

/// A rule's error, prefixed with the entry it was found in.
fn in_entry(entry: &str, err: PolicyError) -> PolicyError {
    PolicyError::without_echo(err.rule, format!("entry {}: {}", echo(entry), err.message))
}

fn refuse_duplicate(seen: &[String], name: &str, entry: &str) -> Result<(), PolicyError> {
    if seen.iter().any(|s| s == name) {
        return Err(PolicyError::without_echo(
            "allowlist.duplicate",
            format!(
                "entry {}: the name {} is listed twice; list it once (with all its variables)",
                echo(entry),
                echo(name)
            ),
        ));
    }
    Ok(())
}

/// Parses the secret allowlist: `NAME[:VAR[:VAR…]]` entries separated by commas. Every name must
/// be a valid Modal object name listed once, every variable a valid environment variable name
/// (repeats of one variable count once).
pub fn secret_allowlist(text: &str) -> Result<Vec<AllowedSecret>, PolicyError> {
    let mut out: Vec<AllowedSecret> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for entry in entries(text) {
        let mut parts = entry.split(':').map(str::trim);
        let name = parts.next().unwrap_or_default();
        let name = modal_name(name).map_err(|e| in_entry(entry, e))?;
        refuse_duplicate(&names, &name, entry)?;
        let mut keys: Vec<String> = Vec::new();
        for key in parts {
            let key = env_name(key).map_err(|e| in_entry(entry, e))?;
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        names.push(name.clone());
        out.push(AllowedSecret { name, keys });
    }
    Ok(out)
}

/// Parses an allowlist of names only (volumes): entries separated by commas, each a valid Modal
/// object name listed once.
pub fn name_allowlist(text: &str) -> Result<Vec<String>, PolicyError> {
    let mut out: Vec<String> = Vec::new();
    for entry in entries(text) {
        if entry.contains(':') {
            return Err(PolicyError::without_echo(
                "allowlist.keys",
                format!(
                    "entry {}: this allowlist takes names only, without ':' and variables",
                    echo(entry)
                ),
            ));
        }
        let name = modal_name(entry).map_err(|e| in_entry(entry, e))?;
        refuse_duplicate(&out, &name, entry)?;
        out.push(name);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn secret(name: &str, keys: &[&str]) -> AllowedSecret {
        AllowedSecret {
            name: name.into(),
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
        }
    }

    #[test]
    fn names_with_and_without_their_variables() {
        assert_eq!(
            secret_allowlist("openai:OPENAI_API_KEY:OPENAI_ORG_ID, github ,db:PGPASSWORD"),
            Ok(vec![
                secret("openai", &["OPENAI_API_KEY", "OPENAI_ORG_ID"]),
                secret("github", &[]),
                secret("db", &["PGPASSWORD"]),
            ])
        );
    }

    #[test]
    fn empty_settings_and_empty_entries_allow_nothing_more() {
        assert_eq!(secret_allowlist(""), Ok(vec![]));
        assert_eq!(secret_allowlist(" , ,"), Ok(vec![]));
        assert_eq!(
            secret_allowlist("a,,b,"),
            Ok(vec![secret("a", &[]), secret("b", &[])])
        );
        assert_eq!(name_allowlist(""), Ok(vec![]));
        assert_eq!(
            name_allowlist("cache, ,data,"),
            Ok(vec!["cache".into(), "data".into()])
        );
    }

    #[test]
    fn a_variable_listed_twice_counts_once() {
        assert_eq!(
            secret_allowlist("s:A:B:A"),
            Ok(vec![secret("s", &["A", "B"])])
        );
    }

    #[test]
    fn bad_entries_are_refused_naming_the_entry_and_the_rule() {
        for (bad, rule) in [
            ("open ai", "modal-name.chars"),
            (":KEY", "modal-name.empty"),
            ("a/b:KEY", "modal-name.chars"),
            ("openai:", "env.empty"),
            ("openai::KEY", "env.empty"),
            ("openai:1KEY", "env.first-char"),
            ("openai:KEY-2", "env.chars"),
            ("openai:KEY=x", "env.chars"),
            ("openai,openai:KEY", "allowlist.duplicate"),
        ] {
            let err = secret_allowlist(bad).expect_err(bad);
            assert_eq!(err.rule, rule, "{bad:?}");
            assert!(err.message.starts_with("entry '"), "{}", err.message);
        }
    }

    #[test]
    fn volumes_take_names_only() {
        assert_eq!(
            name_allowlist("cache:X").unwrap_err().rule,
            "allowlist.keys"
        );
        assert_eq!(name_allowlist("a b").unwrap_err().rule, "modal-name.chars");
        assert_eq!(
            name_allowlist("a,a").unwrap_err().rule,
            "allowlist.duplicate"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]

        #[test]
        fn parsed_entries_are_valid_and_unique(text in any::<String>()) {
            if let Ok(list) = secret_allowlist(&text) {
                let mut names: Vec<&str> = list.iter().map(|s| s.name.as_str()).collect();
                for s in &list {
                    prop_assert_eq!(modal_name(&s.name), Ok(s.name.clone()));
                    for key in &s.keys {
                        prop_assert_eq!(env_name(key), Ok(key.clone()));
                    }
                }
                names.sort_unstable();
                names.dedup();
                prop_assert_eq!(names.len(), list.len());
            }
        }

        #[test]
        fn a_written_allowlist_reads_back(
            list in prop::collection::btree_map(
                "[a-z0-9._-]{1,64}",
                prop::collection::vec("[A-Z_][A-Z0-9_]{0,8}", 0..3),
                0..5,
            ),
        ) {
            let text = list
                .iter()
                .map(|(name, keys)| std::iter::once(name.clone()).chain(keys.clone()).collect::<Vec<_>>().join(":"))
                .collect::<Vec<_>>()
                .join(",");
            let parsed = secret_allowlist(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(parsed.len(), list.len());
            for (got, (name, keys)) in parsed.iter().zip(&list) {
                prop_assert_eq!(&got.name, name);
                let mut unique = keys.clone();
                let mut seen = Vec::new();
                unique.retain(|k| if seen.contains(k) { false } else { seen.push(k.clone()); true });
                prop_assert_eq!(&got.keys, &unique);
            }
        }
    }
}
