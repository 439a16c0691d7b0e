//! Environment variable names, Modal object names, and the deny-by-default allowlists of the
//! secrets and volumes a workspace may mount.

use super::error::PolicyError;

/// Longest environment variable name accepted, in bytes.
pub const MAX_ENV_NAME_BYTES: usize = 255;
/// Longest Modal object name (secret, volume) accepted, in characters.
pub const MAX_MODAL_NAME_CHARS: usize = 64;

/// An environment variable name: `[A-Za-z_][A-Za-z0-9_]*`, at most 255 bytes.
pub fn env_name(text: &str) -> Result<String, PolicyError> {
    let what = "an environment variable name must be 1-255 letters, digits or '_', not starting with a digit";
    let Some(first) = text.bytes().next() else {
        return Err(PolicyError::new("env.empty", what, text));
    };
    if text.len() > MAX_ENV_NAME_BYTES {
        return Err(PolicyError::new("env.too-long", what, text));
    }
    if !(first.is_ascii_alphabetic() || first == b'_') {
        return Err(PolicyError::new("env.first-char", what, text));
    }
    if !text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return Err(PolicyError::new("env.chars", what, text));
    }
    Ok(text.to_owned())
}

/// A Modal object name: 1-64 of `[A-Za-z0-9._-]`.
pub fn modal_name(text: &str) -> Result<String, PolicyError> {
    let what = "a Modal object name must be 1-64 letters, digits, '.', '_' or '-'";
    if text.is_empty() {
        return Err(PolicyError::new("modal-name.empty", what, text));
    }
    if text.len() > MAX_MODAL_NAME_CHARS {
        return Err(PolicyError::new("modal-name.too-long", what, text));
    }
    let ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    if !text.bytes().all(ok) {
        return Err(PolicyError::new("modal-name.chars", what, text));
    }
    Ok(text.to_owned())
}

/// Checks that `name` is a valid Modal object name listed exactly (case-sensitive) in
/// `allowlist`, the value of the setting called `setting`. An empty list denies everything.
///
/// The message names the setting to change, never the names it does allow: a client that probes
/// must not learn which secrets or volumes exist.
pub fn allowed<S: AsRef<str>>(
    name: &str,
    allowlist: &[S],
    setting: &str,
) -> Result<String, PolicyError> {
    let name = modal_name(name)?;
    if allowlist.iter().any(|allowed| allowed.as_ref() == name) {
        return Ok(name);
    }
    Err(PolicyError::new(
        "allowlist.denied",
        format!("this name is not in the allowlist; an operator must add it to the {setting} setting (exact, case-sensitive)"),
        &name,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SETTING: &str = "SECRET_ALLOWLIST";

    #[test]
    fn env_names_follow_the_posix_shape() {
        for ok in ["A", "_", "PATH", "_x1", "a_B_9", &"A".repeat(255)] {
            assert_eq!(env_name(ok).as_deref(), Ok(ok));
        }
        let long = "A".repeat(256);
        for (bad, rule) in [
            ("", "env.empty"),
            (long.as_str(), "env.too-long"),
            ("1A", "env.first-char"),
            ("-A", "env.first-char"),
            ("A-B", "env.chars"),
            ("A=B", "env.chars"),
            ("A B", "env.chars"),
            ("Ä", "env.first-char"),
            ("AÄ", "env.chars"),
            ("A\u{0}", "env.chars"),
        ] {
            let err = env_name(bad).expect_err(bad);
            assert_eq!(err.rule, rule, "{bad:?}");
            assert!(err.message.contains("environment variable name"));
        }
    }

    #[test]
    fn modal_names_are_1_to_64_safe_characters() {
        for ok in ["a", "my-secret_2.prod", &"x".repeat(64)] {
            assert_eq!(modal_name(ok).as_deref(), Ok(ok));
        }
        let long = "x".repeat(65);
        for (bad, rule) in [
            ("", "modal-name.empty"),
            (long.as_str(), "modal-name.too-long"),
            ("a/b", "modal-name.chars"),
            ("a b", "modal-name.chars"),
            ("é", "modal-name.chars"),
        ] {
            assert_eq!(modal_name(bad).unwrap_err().rule, rule, "{bad:?}");
        }
    }

    #[test]
    fn allowlists_deny_by_default() {
        let empty: [&str; 0] = [];
        let err = allowed("github", &empty, SETTING).unwrap_err();
        assert_eq!(err.rule, "allowlist.denied");
        assert!(err.message.contains(SETTING), "{}", err.message);
    }

    #[test]
    fn allowlists_match_exactly_and_case_sensitively() {
        let list = ["github-token", "openai"];
        assert_eq!(allowed("openai", &list, SETTING).as_deref(), Ok("openai"));
        for denied in ["OpenAI", "openai ", "open", "github-token2"] {
            assert!(allowed(denied, &list, SETTING).is_err(), "{denied:?}");
        }
    }

    #[test]
    fn a_denial_never_lists_the_allowed_names() {
        let list = ["prod-db-password", "github-token"];
        let err = allowed("probe", &list, SETTING).unwrap_err();
        assert!(!err.message.contains("prod-db"), "{}", err.message);
        assert!(!err.message.contains("github-token"), "{}", err.message);
        assert!(err.message.contains("'probe'"), "{}", err.message);
    }

    #[test]
    fn an_invalid_name_is_refused_even_if_listed() {
        let list = ["a/b"];
        assert_eq!(
            allowed("a/b", &list, SETTING).unwrap_err().rule,
            "modal-name.chars"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]

        #[test]
        fn env_name_never_panics_and_is_canonical(text in any::<String>()) {
            if let Ok(out) = env_name(&text) {
                prop_assert_eq!(&out, &text);
                prop_assert_eq!(env_name(&out), Ok(out.clone()));
            }
        }

        #[test]
        fn allowed_accepts_only_listed_valid_names(
            name in any::<String>(),
            list in prop::collection::vec("[a-z.-]{0,3}", 0..4),
        ) {
            if let Ok(out) = allowed(&name, &list, SETTING) {
                prop_assert_eq!(&out, &name);
                prop_assert!(list.contains(&out));
                prop_assert_eq!(modal_name(&out), Ok(out.clone()));
            }
        }

        #[test]
        fn every_valid_listed_name_is_allowed(name in "[A-Za-z0-9._-]{1,64}") {
            prop_assert_eq!(allowed(&name, std::slice::from_ref(&name), SETTING), Ok(name.clone()));
        }
    }
}
