//! A template's name: what a client calls a prepared workspace image (`template_create`), and
//! what the gateway builds keys, tags and labels from.
//!
//! The name reaches the shared store as a key's folder (`templates/<name>/…`), a build
//! workspace's tag value and its snapshot's label (`template <name>`), and log lines. So it is
//! held to the narrowest shape all of them take: lowercase ASCII letters and digits, then also
//! `.`, `_` or `-`, and short enough for the label's 64 characters.

use super::error::PolicyError;

/// Longest template name, in characters (all ASCII): `template <name>` stays within a
/// snapshot label's 64 characters.
pub const MAX_TEMPLATE_NAME_CHARS: usize = 48;

/// A template's name: 1-48 of `[a-z0-9._-]`, starting with a letter or digit. Lowercase only, so
/// that no two names differ by case alone (a key, a label and a person read them alike).
pub fn template_name(text: &str) -> Result<String, PolicyError> {
    let what = "a template name is 1-48 lowercase letters, digits, '.', '_' or '-', starting with \
                a letter or digit";
    let Some(first) = text.bytes().next() else {
        return Err(PolicyError::new("template-name.empty", what, text));
    };
    if text.len() > MAX_TEMPLATE_NAME_CHARS {
        return Err(PolicyError::new("template-name.too-long", what, text));
    }
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !alnum(first) {
        return Err(PolicyError::new("template-name.first-char", what, text));
    }
    if !text
        .bytes()
        .all(|b| alnum(b) || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(PolicyError::new("template-name.chars", what, text));
    }
    Ok(text.to_owned())
}

/// The shape of a template's name (a schema's `pattern`): exactly what [`template_name`]
/// accepts.
pub fn template_name_pattern() -> String {
    format!("^[a-z0-9][a-z0-9._-]{{0,{}}}$", MAX_TEMPLATE_NAME_CHARS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn template_names_are_short_lowercase_and_key_safe() {
        let longest = "a".repeat(MAX_TEMPLATE_NAME_CHARS);
        for ok in ["a", "9", "web-app", "py3.12_base", longest.as_str()] {
            assert_eq!(template_name(ok).as_deref(), Ok(ok));
        }
        let long = "a".repeat(MAX_TEMPLATE_NAME_CHARS + 1);
        for (bad, rule) in [
            ("", "template-name.empty"),
            (long.as_str(), "template-name.too-long"),
            ("-a", "template-name.first-char"),
            (".a", "template-name.first-char"),
            ("_a", "template-name.first-char"),
            ("Web", "template-name.first-char"),
            ("wEb", "template-name.chars"),
            ("a/b", "template-name.chars"),
            ("a b", "template-name.chars"),
            ("a\n", "template-name.chars"),
            ("aé", "template-name.chars"),
            ("é", "template-name.first-char"),
        ] {
            let err = template_name(bad).expect_err(bad);
            assert_eq!(err.rule, rule, "{bad:?}");
            assert!(
                err.message.starts_with("a template name is"),
                "{}",
                err.message
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]

        #[test]
        fn the_pattern_accepts_exactly_what_the_rule_accepts(text in "[a-zA-Z0-9._/ -]{0,50}") {
            let pattern = regex::Regex::new(&template_name_pattern()).unwrap();
            prop_assert_eq!(pattern.is_match(&text), template_name(&text).is_ok());
        }

        #[test]
        fn template_name_never_panics_and_is_canonical(text in any::<String>()) {
            if let Ok(out) = template_name(&text) {
                prop_assert_eq!(&out, &text);
            }
        }
    }
}
