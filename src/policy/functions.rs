//! Deployed Modal Functions a client may call: app and function names as Modal accepts them,
//! the operator's `app/function` allowlist, and Modal's function-call ids.
//!
//! Deny by default: an empty allowlist allows nothing, and a denial never lists what is allowed.

use super::error::{echo, PolicyError};
use super::names::{modal_name, MAX_MODAL_NAME_CHARS};

/// Shortest and longest run of alphanumerics after `fc-` in a function-call id. Modal's ids are
/// a prefix and 22 base62 characters (older objects) or a 26-character ULID; the bounds leave
/// room for either and refuse anything that could be a path, an option or a URL.
pub const MIN_CALL_ID_CHARS: usize = 20;
pub const MAX_CALL_ID_CHARS: usize = 32;

/// A deployed app's name as Modal accepts it (`modal/_utils/name_utils.py`,
/// `is_valid_object_name`): 1-64 of `[A-Za-z0-9._-]`, and not shaped like an app id
/// (`ap-` and 22 alphanumerics), which Modal would read as an id instead of a name.
pub fn modal_app_name(text: &str) -> Result<String, PolicyError> {
    let name = modal_name(text)?;
    let rest = name.strip_prefix("ap-").unwrap_or("");
    if rest.len() == 22 && rest.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(PolicyError::new(
            "app-name.app-id",
            "an app name must not be shaped like an app id ('ap-' and 22 letters or digits)",
            text,
        ));
    }
    Ok(name)
}

/// A function's name inside a deployed app: 1-64 letters, digits, `_` or `-`. No `.`: the SDK
/// refuses it (`Function.from_name` sends class methods to `Cls.from_name`), and methods of
/// classes are not offered.
pub fn modal_function_name(text: &str) -> Result<String, PolicyError> {
    let what =
        "a function name must be 1-64 letters, digits, '_' or '-' (class methods are not offered)";
    if text.is_empty() {
        return Err(PolicyError::new("function-name.empty", what, text));
    }
    if text.len() > MAX_MODAL_NAME_CHARS {
        return Err(PolicyError::new("function-name.too-long", what, text));
    }
    if !text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
    {
        return Err(PolicyError::new("function-name.chars", what, text));
    }
    Ok(text.to_owned())
}

/// `app/function`, each half checked; the canonical form is the same text.
fn qualified(entry: &str) -> Result<String, PolicyError> {
    let Some((app, function)) = entry.split_once('/') else {
        return Err(PolicyError::new(
            "function.shape",
            "a function is named APP/FUNCTION (one '/')",
            entry,
        ));
    };
    Ok(format!(
        "{}/{}",
        modal_app_name(app)?,
        modal_function_name(function)?
    ))
}

/// Parses `MODAL_WORKSPACE_ALLOWED_FUNCTIONS`: `APP/FUNCTION` entries separated by commas, each
/// valid and listed once. Empty entries (a trailing comma) are ignored.
pub fn function_allowlist(text: &str) -> Result<Vec<String>, PolicyError> {
    let mut out: Vec<String> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let name = qualified(entry).map_err(|e| {
            PolicyError::without_echo(e.rule, format!("entry {}: {}", echo(entry), e.message))
        })?;
        if out.contains(&name) {
            return Err(PolicyError::without_echo(
                "allowlist.duplicate",
                format!("entry {}: listed twice; list it once", echo(entry)),
            ));
        }
        out.push(name);
    }
    Ok(out)
}

/// Checks that function `function` of app `app` is listed in `allowlist` (exact,
/// case-sensitive) and returns `app/function`. Both names are checked first, so a denial only
/// ever quotes a valid name; it names the setting, never the names it allows.
pub fn allowed_function<S: AsRef<str>>(
    app: &str,
    function: &str,
    allowlist: &[S],
    setting: &str,
) -> Result<String, PolicyError> {
    let name = format!(
        "{}/{}",
        modal_app_name(app)?,
        modal_function_name(function)?
    );
    if allowlist.iter().any(|a| a.as_ref() == name) {
        return Ok(name);
    }
    Err(PolicyError::new(
        "allowlist.denied",
        format!("this function is not in the allowlist; an operator must add APP/FUNCTION to the {setting} setting (exact, case-sensitive)"),
        &name,
    ))
}

/// The shape of a function-call id (an OpenAPI `pattern`): exactly what
/// [`function_call_id`] accepts.
pub fn function_call_id_pattern() -> String {
    format!("^fc-[A-Za-z0-9]{{{MIN_CALL_ID_CHARS},{MAX_CALL_ID_CHARS}}}$")
}

/// The shape of a deployed app's name (an OpenAPI `pattern`): a Modal name. The rule also
/// refuses a name shaped like an app id, which a pattern without look-ahead cannot say.
pub fn modal_app_name_pattern() -> String {
    format!("^[A-Za-z0-9._-]{{1,{MAX_MODAL_NAME_CHARS}}}$")
}

/// A Modal function-call id: `fc-` and 20-32 ASCII letters or digits.
pub fn function_call_id(text: &str) -> Result<String, PolicyError> {
    let what = format!(
        "a function call id is 'fc-' and {MIN_CALL_ID_CHARS}-{MAX_CALL_ID_CHARS} letters or digits (as function_spawn returns it)"
    );
    let Some(rest) = text.strip_prefix("fc-") else {
        return Err(PolicyError::new("function-call-id.prefix", what, text));
    };
    if !(MIN_CALL_ID_CHARS..=MAX_CALL_ID_CHARS).contains(&rest.len()) {
        return Err(PolicyError::new("function-call-id.length", what, text));
    }
    if !rest.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(PolicyError::new("function-call-id.chars", what, text));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]
        #[test]
        fn the_patterns_accept_what_the_rules_accept(text in "(fc-|ap-)?[A-Za-z0-9._/-]{0,70}") {
            let call = regex::Regex::new(&function_call_id_pattern()).unwrap();
            prop_assert_eq!(call.is_match(&text), function_call_id(&text).is_ok());
            // The app name's pattern is its shape: every name the rule takes matches it.
            let app = regex::Regex::new(&modal_app_name_pattern()).unwrap();
            if modal_app_name(&text).is_ok() {
                prop_assert!(app.is_match(&text));
            }
        }
    }

    /// The property above rarely draws a valid call id at random: known ones pin both patterns.
    #[test]
    fn the_patterns_take_known_good_names_and_refuse_known_bad_ones() {
        let call = regex::Regex::new(&function_call_id_pattern()).unwrap();
        for id in ["fc-01HZX3K9Q8W7E6R5T4Y3U2I1O0", "fc-abcdefghijABCDEFGHIJ"] {
            assert!(function_call_id(id).is_ok() && call.is_match(id), "{id}");
        }
        for id in [
            "fc-short",
            "x fc-abcdefghijABCDEFGHIJ",
            "fc-abcdefghij/BCDEFGHIJ",
        ] {
            assert!(function_call_id(id).is_err() && !call.is_match(id), "{id}");
        }
        let app = regex::Regex::new(&modal_app_name_pattern()).unwrap();
        assert!(app.is_match("my-app_2.prod"));
        for name in ["", "my app", "a/b", &"a".repeat(MAX_MODAL_NAME_CHARS + 1)] {
            assert!(
                modal_app_name(name).is_err() && !app.is_match(name),
                "{name:?}"
            );
        }
    }

    const SETTING: &str = "MODAL_WORKSPACE_ALLOWED_FUNCTIONS";

    #[test]
    fn app_names_are_modal_names_that_are_not_app_ids() {
        for ok in ["my-app_2.prod", "ap-short", "ap-1234567890123456789012x"] {
            assert_eq!(modal_app_name(ok).as_deref(), Ok(ok));
        }
        // The name rule is `modal_name`'s (tested with it); the app-id shape is this one's.
        assert_eq!(modal_app_name("a/b").unwrap_err().rule, "modal-name.chars");
        assert_eq!(
            modal_app_name("ap-1234567890abcdefghijKL")
                .unwrap_err()
                .rule,
            "app-name.app-id"
        );
    }

    #[test]
    fn function_names_refuse_dots_and_separators() {
        for ok in ["f", "predict_v2", "do-it", &"f".repeat(64)] {
            assert_eq!(modal_function_name(ok).as_deref(), Ok(ok));
        }
        for (bad, rule) in [
            ("", "function-name.empty"),
            ("Cls.method", "function-name.chars"),
            ("a/b", "function-name.chars"),
            ("-x y", "function-name.chars"),
        ] {
            assert_eq!(modal_function_name(bad).unwrap_err().rule, rule, "{bad:?}");
        }
    }

    #[test]
    fn the_allowlist_takes_app_slash_function_entries_once_each() {
        assert_eq!(
            function_allowlist(" ml/predict, etl/run-job ,"),
            Ok(vec!["ml/predict".to_owned(), "etl/run-job".to_owned()])
        );
        assert_eq!(function_allowlist(""), Ok(vec![]));
        for (bad, rule) in [
            ("ml", "function.shape"),
            ("ml/a/b", "function-name.chars"),
            ("/f", "modal-name.empty"),
            ("ml/", "function-name.empty"),
            ("ml/f,ml/f", "allowlist.duplicate"),
        ] {
            let err = function_allowlist(bad).unwrap_err();
            assert_eq!(err.rule, rule, "{bad:?}");
            assert!(err.message.starts_with("entry '"), "{}", err.message);
        }
    }

    #[test]
    fn functions_are_denied_by_default_without_listing_the_allowed() {
        let empty: [&str; 0] = [];
        let err = allowed_function("ml", "predict", &empty, SETTING).unwrap_err();
        assert_eq!(err.rule, "allowlist.denied");
        assert!(err.message.contains(SETTING));
        let list = ["ml/secret-model"];
        let err = allowed_function("ml", "predict", &list, SETTING).unwrap_err();
        assert!(!err.message.contains("secret-model"), "{}", err.message);
        assert_eq!(
            allowed_function("ml", "secret-model", &list, SETTING).as_deref(),
            Ok("ml/secret-model")
        );
        assert!(allowed_function("ML", "secret-model", &list, SETTING).is_err());
        assert_eq!(
            allowed_function("ml", "a.b", &list, SETTING)
                .unwrap_err()
                .rule,
            "function-name.chars"
        );
    }

    #[test]
    fn function_call_ids_are_fc_and_alphanumerics() {
        for ok in ["fc-01HZX3N5V8Q2W4E6R8T0Y2U4I6", "fc-abcdefghijABCDEFGHIJ12"] {
            assert_eq!(function_call_id(ok).as_deref(), Ok(ok));
        }
        for (bad, rule) in [
            ("", "function-call-id.prefix"),
            ("sb-01HZX3N5V8Q2W4E6R8T0Y2U4I6", "function-call-id.prefix"),
            ("fc-short", "function-call-id.length"),
            (
                "fc-../../../../etc/passwd/xxxxxxxx",
                "function-call-id.chars",
            ),
            ("fc-01HZX3N5V8Q2W4E6R8T0Y2U4I6?x", "function-call-id.chars"),
        ] {
            assert_eq!(function_call_id(bad).unwrap_err().rule, rule, "{bad:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]

        #[test]
        fn parsed_allowlists_hold_valid_unique_names(text in any::<String>()) {
            if let Ok(list) = function_allowlist(&text) {
                for name in &list {
                    let (app, function) = name.split_once('/').unwrap();
                    prop_assert!(allowed_function(app, function, &list, SETTING).is_ok());
                }
                let mut unique = list.clone();
                unique.sort();
                unique.dedup();
                prop_assert_eq!(unique.len(), list.len());
            }
        }

        #[test]
        fn call_ids_never_panic_and_are_canonical(text in any::<String>()) {
            if let Ok(out) = function_call_id(&text) {
                prop_assert_eq!(&out, &text);
            }
        }
    }
}
