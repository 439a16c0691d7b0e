//! Workspace tags and idempotency keys: the labels a client may put on a workspace, the tags the
//! gateway keeps for itself, and the key that makes a create or an exec start idempotent.
//!
//! The managed tag names live here and nowhere else: Python reads them from the binding.

use std::sync::LazyLock;

use regex::Regex;

use super::error::{echo, PolicyError};

/// The tags a driver writes when it creates a workspace: what the workspace is, where its root
/// is and when it was made. They never change, so a request may only repeat their values.
/// In this order: managed-by, workspace-id, workspace-root, created-at.
pub const WORKSPACE_TAGS: [&str; 4] =
    ["managed-by", "workspace-id", "workspace-root", "created-at"];
/// Every exact tag name the gateway manages: the workspace tags and the idempotency key the
/// service records at create. A client setting one could forge a workspace's identity, its
/// root, or the key another client's retry finds it by.
pub const MANAGED_TAGS: [&str; 5] = [
    WORKSPACE_TAGS[0],
    WORKSPACE_TAGS[1],
    WORKSPACE_TAGS[2],
    WORKSPACE_TAGS[3],
    IDEMPOTENCY_TAG,
];
/// The tag under which the service records a create's idempotency key.
pub const IDEMPOTENCY_TAG: &str = "idempotency-key";
/// Prefixes of the tags the gateway writes itself: the service's record of what a git operation
/// cloned into the workspace (`repo-url`, `repo-path`, …), and a driver's own records
/// ([`DRIVER_RECORD_PREFIX`]).
pub const MANAGED_TAG_PREFIXES: [&str; 2] = ["repo-", DRIVER_RECORD_PREFIX];
/// The prefix of the records a driver keeps in a workspace's tags (the Modal driver's snapshots,
/// suspension, lineage, …: `mwc-sn-…`, `mwc-suspension`). Neither a client nor the service ever
/// writes one, so unlike the `repo-` tags a driver refuses them among the tags it is asked to
/// store (a forged one could point a resume at another image).
const DRIVER_RECORD_PREFIX: &str = "mwc-";

/// Most tags a client may set on one workspace.
pub const MAX_TAGS: usize = 32;
/// Longest tag key, in characters (all ASCII).
pub const MAX_TAG_KEY_CHARS: usize = 63;
/// Longest value of a client's tag, in characters.
pub const MAX_TAG_VALUE_CHARS: usize = 256;
/// Longest idempotency key, in characters (all ASCII).
pub const MAX_IDEMPOTENCY_KEY_CHARS: usize = 128;

/// Whether `key` is a tag the gateway manages (exactly, or by a managed prefix).
pub fn is_managed_tag(key: &str) -> bool {
    MANAGED_TAGS.contains(&key) || MANAGED_TAG_PREFIXES.iter().any(|p| key.starts_with(p))
}

/// A tag key: 1-63 ASCII letters, digits, `.`, `_` or `-`, starting with a letter or digit.
pub fn tag_key(key: &str) -> Result<String, PolicyError> {
    let what =
        "a tag key must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit";
    let Some(first) = key.bytes().next() else {
        return Err(PolicyError::new("tag.key-empty", what, key));
    };
    if key.len() > MAX_TAG_KEY_CHARS {
        return Err(PolicyError::new("tag.key-too-long", what, key));
    }
    if !first.is_ascii_alphanumeric() {
        return Err(PolicyError::new("tag.key-first-char", what, key));
    }
    let ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    if !key.bytes().all(ok) {
        return Err(PolicyError::new("tag.key-chars", what, key));
    }
    Ok(key.to_owned())
}

/// Printable as Python's `str.isprintable` means it: no character of the Unicode categories
/// Other (control, format, surrogate, private use, unassigned) or Separator, except the space.
/// Invisible and direction-changing characters would make a label read as something it is not.
fn printable(text: &str) -> bool {
    static PRINTABLE: LazyLock<Regex> = LazyLock::new(|| {
        // A constant pattern: it compiles, or no test passes.
        Regex::new(r"\A(?:[^\p{C}\p{Z}]| )*\z").expect("the printable pattern compiles")
    });
    PRINTABLE.is_match(text)
}

/// Checks the labels a client asks to put on a workspace: at most 32, each key of the tag-key
/// shape and not managed by the gateway, each value at most 256 printable characters.
pub fn caller_tags<K: AsRef<str>, V: AsRef<str>>(tags: &[(K, V)]) -> Result<(), PolicyError> {
    if tags.len() > MAX_TAGS {
        return Err(PolicyError::without_echo(
            "tag.too-many",
            format!("at most {MAX_TAGS} tags (got {})", tags.len()),
        ));
    }
    for (key, value) in tags {
        let key = tag_key(key.as_ref())?;
        if is_managed_tag(&key) {
            return Err(PolicyError::without_echo(
                "tag.managed",
                format!(
                    "tag {} is managed by the gateway and cannot be set; choose another key \
                     (managed: {}, and every key starting with {})",
                    echo(&key),
                    MANAGED_TAGS.join(", "),
                    MANAGED_TAG_PREFIXES.join(", "),
                ),
            ));
        }
        let value = value.as_ref();
        // The value is the client's own text, but may be anything: it is never quoted.
        if value.chars().count() > MAX_TAG_VALUE_CHARS {
            return Err(PolicyError::without_echo(
                "tag.value-too-long",
                format!(
                    "tag {}: a value must be at most {MAX_TAG_VALUE_CHARS} printable characters",
                    echo(&key)
                ),
            ));
        }
        if !printable(value) {
            return Err(PolicyError::without_echo(
                "tag.value-chars",
                format!(
                    "tag {}: a value must be at most {MAX_TAG_VALUE_CHARS} printable characters \
                     (no control, format or separator characters other than the space)",
                    echo(&key)
                ),
            ));
        }
    }
    Ok(())
}

/// Checks one tag a driver is asked to store. The service hands drivers the client's tags
/// (checked by [`caller_tags`]) together with the ones it manages, so here every key needs only
/// the tag-key shape; but a workspace tag ([`WORKSPACE_TAGS`]) must keep the value it was
/// created with (`fixed`: `None` while creating, when the driver writes them itself), and no
/// key may be one of a driver's own records ([`DRIVER_RECORD_PREFIX`]), which only the driver
/// writes, past this check.
pub fn stored_tag(key: &str, value: &str, fixed: Option<&str>) -> Result<(), PolicyError> {
    let key = tag_key(key)?;
    if key.starts_with(DRIVER_RECORD_PREFIX) {
        return Err(PolicyError::without_echo(
            "tag.managed",
            format!(
                "tag {} is managed by the gateway and cannot be set: every key starting with \
                 {DRIVER_RECORD_PREFIX} is a driver's own record; choose another key",
                echo(&key)
            ),
        ));
    }
    if WORKSPACE_TAGS.contains(&key.as_str()) && fixed != Some(value) {
        return Err(PolicyError::without_echo(
            "tag.managed",
            format!(
                "tag {} is managed by the gateway and cannot be set",
                echo(&key)
            ),
        ));
    }
    Ok(())
}

/// The most characters of a snapshot's label.
pub const MAX_SNAPSHOT_LABEL_CHARS: usize = 64;

/// A snapshot's label: at most 64 printable characters (spaces allowed, nothing that can
/// break a line or hide text), stored beside the snapshot and shown to clients.
pub fn snapshot_label(text: &str) -> Result<String, PolicyError> {
    let what = "a snapshot label is at most 64 printable characters";
    if text.chars().count() > MAX_SNAPSHOT_LABEL_CHARS {
        return Err(PolicyError::new("snapshot-label.too-long", what, text));
    }
    if !printable(text) {
        return Err(PolicyError::new("snapshot-label.chars", what, text));
    }
    Ok(text.to_owned())
}

/// An idempotency key: 1-128 ASCII letters, digits, `.`, `_`, `:` or `-`.
pub fn idempotency_key(text: &str) -> Result<String, PolicyError> {
    let what = "an idempotency key is 1-128 letters, digits, '.', '_', ':' or '-'";
    if text.is_empty() {
        return Err(PolicyError::new("idempotency-key.empty", what, text));
    }
    if text.len() > MAX_IDEMPOTENCY_KEY_CHARS {
        return Err(PolicyError::new("idempotency-key.too-long", what, text));
    }
    let ok = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-');
    if !text.bytes().all(ok) {
        return Err(PolicyError::new("idempotency-key.chars", what, text));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn one(key: &str, value: &str) -> Result<(), PolicyError> {
        caller_tags(&[(key, value)])
    }

    #[test]
    fn snapshot_labels_are_short_and_printable() {
        let longest = "é".repeat(64);
        for ok in ["", "before the refactor", longest.as_str()] {
            assert_eq!(snapshot_label(ok).as_deref(), Ok(ok));
        }
        let long = "a".repeat(65);
        for (bad, rule) in [
            (long.as_str(), "snapshot-label.too-long"),
            ("two\nlines", "snapshot-label.chars"),
            ("tab\there", "snapshot-label.chars"),
            ("hidden\u{202e}text", "snapshot-label.chars"),
        ] {
            assert_eq!(
                snapshot_label(bad).map_err(|e| e.rule),
                Err(rule),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn tag_keys_follow_the_label_shape() {
        let longest = "k".repeat(63);
        for ok in ["a", "A1", "team", "9lives", "a.b_c-d", longest.as_str()] {
            assert_eq!(tag_key(ok).as_deref(), Ok(ok));
        }
        let long = "k".repeat(64);
        for (bad, rule) in [
            ("", "tag.key-empty"),
            (long.as_str(), "tag.key-too-long"),
            ("-a", "tag.key-first-char"),
            (".a", "tag.key-first-char"),
            ("_a", "tag.key-first-char"),
            ("é", "tag.key-first-char"),
            ("bad key", "tag.key-chars"),
            ("a/b", "tag.key-chars"),
            ("a:b", "tag.key-chars"),
            ("aé", "tag.key-chars"),
            ("a\n", "tag.key-chars"),
        ] {
            let err = tag_key(bad).expect_err(bad);
            assert_eq!(err.rule, rule, "{bad:?}");
            assert!(
                err.message.starts_with("a tag key must be"),
                "{}",
                err.message
            );
        }
    }

    #[test]
    fn every_managed_tag_and_prefix_is_refused_to_clients() {
        for key in MANAGED_TAGS {
            let err = one(key, "mine").unwrap_err();
            assert_eq!(err.rule, "tag.managed", "{key}");
            assert!(err.message.contains(&format!("'{key}'")), "{}", err.message);
        }
        for key in [
            "repo-url",
            "repo-path",
            "repo-",
            "repo-anything",
            "mwc-",
            "mwc-sn-0123",
            "mwc-suspension",
        ] {
            assert_eq!(one(key, "x").unwrap_err().rule, "tag.managed", "{key}");
        }
        // Only the exact names and the prefix: look-alikes are ordinary labels.
        for key in [
            "managed-by2",
            "Workspace-id",
            "repo",
            "repository",
            "my-repo-url",
            "mwc",
            "MWC-sn",
            "my-mwc-tag",
        ] {
            assert_eq!(one(key, "x"), Ok(()), "{key}");
        }
    }

    #[test]
    fn a_managed_refusal_says_which_keys_are_managed() {
        let message = one("workspace-id", "x").unwrap_err().message;
        for key in MANAGED_TAGS.iter().chain(&MANAGED_TAG_PREFIXES) {
            assert!(message.contains(key), "{message}");
        }
    }

    #[test]
    fn values_are_at_most_256_printable_characters() {
        let longest = "é".repeat(256);
        for ok in [
            "",
            "a b",
            "Zürich",
            "日本",
            "🙂",
            "x=1,y=2",
            longest.as_str(),
        ] {
            assert_eq!(one("k", ok), Ok(()), "{ok:?}");
        }
        assert_eq!(
            one("k", &"x".repeat(257)).unwrap_err().rule,
            "tag.value-too-long"
        );
        for bad in [
            "line\nbreak",
            "tab\there",
            "nul\0",
            "\u{7f}",
            "nbsp\u{a0}",
            "zero\u{200b}width",
            "rtl\u{202e}override",
            "line\u{2028}sep",
            "private\u{e000}",
            "unassigned\u{378}",
        ] {
            let err = one("k", bad).expect_err(bad);
            assert_eq!(err.rule, "tag.value-chars", "{bad:?}");
        }
    }

    #[test]
    fn a_value_is_never_quoted_in_a_refusal() {
        let err = one("token", &format!("s3cret\n{}", "x".repeat(10))).unwrap_err();
        assert!(!err.message.contains("s3cret"), "{}", err.message);
        assert!(err.message.contains("'token'"), "{}", err.message);
    }

    #[test]
    fn at_most_32_tags() {
        let tags: Vec<(String, String)> = (0..32).map(|i| (format!("k{i}"), "v".into())).collect();
        assert_eq!(caller_tags(&tags), Ok(()));
        let mut more = tags.clone();
        more.push(("k32".into(), "v".into()));
        let err = caller_tags(&more).unwrap_err();
        assert_eq!(err.rule, "tag.too-many");
        assert!(err.message.contains("at most 32 tags"), "{}", err.message);
    }

    #[test]
    fn a_driver_keeps_the_workspace_tags_it_wrote() {
        for key in WORKSPACE_TAGS {
            assert_eq!(stored_tag(key, "v", Some("v")), Ok(()), "{key}");
            assert_eq!(
                stored_tag(key, "v", Some("w")).unwrap_err().rule,
                "tag.managed"
            );
            assert_eq!(stored_tag(key, "v", None).unwrap_err().rule, "tag.managed");
        }
        // The service's own tags reach drivers with the client's: only their shape is checked.
        for key in [IDEMPOTENCY_TAG, "repo-url", "repo-path", "team"] {
            assert_eq!(
                stored_tag(key, "/workspace/a/long/path", None),
                Ok(()),
                "{key}"
            );
        }
        assert_eq!(
            stored_tag("bad key", "v", None).unwrap_err().rule,
            "tag.key-chars"
        );
    }

    #[test]
    fn a_driver_record_is_refused_to_clients_and_to_what_a_driver_stores() {
        assert!(MANAGED_TAG_PREFIXES.contains(&DRIVER_RECORD_PREFIX));
        for key in ["mwc-", "mwc-sn-0123", "mwc-resources", "mwc-lineage"] {
            let err = one(key, "forged").unwrap_err();
            assert_eq!(err.rule, "tag.managed", "{key}");
            assert!(err.message.contains("mwc-"), "{}", err.message);
            // Unlike the service's `repo-` tags, no request hands a driver one to store.
            let err = stored_tag(key, "forged", None).unwrap_err();
            assert_eq!(err.rule, "tag.managed", "{key}");
            assert!(err.message.contains(&format!("'{key}'")), "{}", err.message);
            assert!(!err.message.contains("forged"), "{}", err.message);
        }
        // The prefix is exact and case-sensitive: a tag that only resembles one is a label.
        for key in ["mwc", "MWC-sn", "my-mwc-tag"] {
            assert_eq!(stored_tag(key, "v", None), Ok(()), "{key}");
        }
    }

    #[test]
    fn idempotency_keys_are_1_to_128_safe_characters() {
        let longest = "k".repeat(128);
        for ok in ["k", "retry:1", "a.b_c-d:E9", longest.as_str()] {
            assert_eq!(idempotency_key(ok).as_deref(), Ok(ok));
        }
        let long = "k".repeat(129);
        for (bad, rule) in [
            ("", "idempotency-key.empty"),
            (long.as_str(), "idempotency-key.too-long"),
            ("a b", "idempotency-key.chars"),
            ("a/b", "idempotency-key.chars"),
            ("ключ", "idempotency-key.chars"),
            ("k\n", "idempotency-key.chars"),
        ] {
            let err = idempotency_key(bad).expect_err(bad);
            assert_eq!(err.rule, rule, "{bad:?}");
            assert!(
                err.message.starts_with("an idempotency key is"),
                "{}",
                err.message
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]

        #[test]
        fn accepted_tags_have_the_documented_shape(
            key in any::<String>(),
            value in any::<String>(),
        ) {
            if one(&key, &value).is_ok() {
                prop_assert!((1..=MAX_TAG_KEY_CHARS).contains(&key.len()));
                prop_assert!(key.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)));
                prop_assert!(key.as_bytes()[0].is_ascii_alphanumeric());
                prop_assert!(!is_managed_tag(&key));
                prop_assert!(value.chars().count() <= MAX_TAG_VALUE_CHARS);
                prop_assert!(!value.chars().any(|c| c.is_control() || (c.is_whitespace() && c != ' ')));
            }
        }

        #[test]
        fn every_well_shaped_unmanaged_tag_is_accepted(
            key in "[A-Za-z0-9][A-Za-z0-9._-]{0,62}",
            value in "[ -~]{0,256}",
        ) {
            prop_assume!(!is_managed_tag(&key));
            prop_assert_eq!(one(&key, &value), Ok(()));
        }

        #[test]
        fn idempotency_key_accepts_exactly_its_alphabet(text in any::<String>()) {
            let shaped = (1..=MAX_IDEMPOTENCY_KEY_CHARS).contains(&text.len())
                && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b));
            prop_assert_eq!(idempotency_key(&text).is_ok(), shaped);
        }
    }
}
