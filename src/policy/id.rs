//! Workspace, exec, watch, snapshot, task and metrics ids: `KIND-` and 32 lowercase hex digits of OS randomness.
//! Ids are capabilities in URLs and logs, so they are checked exactly before any lookup.

use std::fs::File;
use std::io::Read;

use super::error::PolicyError;

/// Random bytes per id: 128 bits, 32 hex digits.
const ID_BYTES: usize = 16;

/// The kinds of object an id can name; the prefix is the kind's wire name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdKind {
    Workspace,
    Exec,
    Watch,
    Snapshot,
    /// A long gateway operation's progress stream (a snapshot being taken).
    Task,
    /// A workspace's metrics stream: the samples one agent daemon takes while it runs.
    Metrics,
    /// A run recorded by `experiment_start`.
    Experiment,
}

impl IdKind {
    pub const ALL: [IdKind; 7] = [
        Self::Workspace,
        Self::Exec,
        Self::Watch,
        Self::Snapshot,
        Self::Task,
        Self::Metrics,
        Self::Experiment,
    ];

    /// Parses a kind's wire name (`ws`, `ex`, `fw`, `sn`, `tk`, `mt`, `xp`).
    pub fn parse(kind: &str) -> Result<Self, PolicyError> {
        Self::ALL
            .into_iter()
            .find(|k| k.prefix() == kind)
            .ok_or_else(|| {
                PolicyError::new(
                    "id.kind",
                    "unknown id kind; the kinds are ws (workspace), ex (exec), fw (watch), sn (snapshot), \
                     tk (task), mt (metrics) and xp (experiment run)",
                    kind,
                )
            })
    }

    pub fn prefix(self) -> &'static str {
        match self {
            Self::Workspace => "ws",
            Self::Exec => "ex",
            Self::Watch => "fw",
            Self::Snapshot => "sn",
            Self::Task => "tk",
            Self::Metrics => "mt",
            Self::Experiment => "xp",
        }
    }

    /// What the id names, with its article, for messages ("an exec").
    pub fn noun(self) -> &'static str {
        match self {
            Self::Workspace => "a workspace",
            Self::Exec => "an exec",
            Self::Watch => "a watch",
            Self::Snapshot => "a snapshot",
            Self::Task => "a task",
            Self::Metrics => "a metrics stream",
            Self::Experiment => "an experiment run",
        }
    }
}

/// A fresh id of `kind`: its prefix, `-`, and 32 lowercase hex digits from `/dev/urandom`.
///
/// `/dev/urandom` rather than the `getrandom` crate: it is the kernel's CSPRNG too, needs no new
/// dependency, never blocks once the system has booted, and every environment we run in (hosts,
/// bubblewrap with `--dev`, Modal sandboxes) has it. Failing to read it is reported, not ignored:
/// an id must never be guessable.
pub fn new_id(kind: &str) -> Result<String, PolicyError> {
    let kind = IdKind::parse(kind)?;
    let bytes: [u8; ID_BYTES] = os_random("id")?;
    let mut id = String::with_capacity(3 + 2 * ID_BYTES);
    id.push_str(kind.prefix());
    id.push('-');
    for b in bytes {
        id.push(char::from(HEX[usize::from(b >> 4)]));
        id.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    Ok(id)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `N` bytes from the kernel's CSPRNG (see [`new_id`] for why `/dev/urandom`), for a new `what`
/// (an id, a ticket's nonce): an error, never a guessable value, when it cannot be read.
pub(super) fn os_random<const N: usize>(what: &str) -> Result<[u8; N], PolicyError> {
    let mut bytes = [0u8; N];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| {
            PolicyError::without_echo(
                "id.random-unavailable",
                format!(
                    "cannot make a new {what}: the OS random source /dev/urandom is unreadable \
                     ({e})"
                ),
            )
        })?;
    Ok(bytes)
}

/// The shape of the ids of `kinds` as a regular expression (an OpenAPI `pattern`): exactly what
/// [`check_id`] accepts for one of them, so that a schema never drifts from the rule.
pub fn id_pattern(kinds: &[IdKind]) -> String {
    let prefixes: Vec<&str> = kinds.iter().map(|k| k.prefix()).collect();
    let prefix = match prefixes.as_slice() {
        [one] => (*one).to_owned(),
        many => format!("({})", many.join("|")),
    };
    format!("^{prefix}-[0-9a-f]{{{}}}$", 2 * ID_BYTES)
}

/// Checks that `text` is an id of `kind` and returns it unchanged (ids have one spelling).
pub fn check_id(kind: &str, text: &str) -> Result<String, PolicyError> {
    let kind = IdKind::parse(kind)?;
    let expected = format!(
        "{} id must be '{}-' followed by 32 lowercase hex digits",
        kind.noun(),
        kind.prefix()
    );
    let Some(digits) = text
        .strip_prefix(kind.prefix())
        .and_then(|rest| rest.strip_prefix('-'))
    else {
        return Err(PolicyError::new("id.prefix", expected, text));
    };
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if digits.len() != 2 * ID_BYTES || !digits.bytes().all(hex) {
        return Err(PolicyError::new("id.format", expected, text));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    #[test]
    fn new_ids_have_the_kind_prefix_and_32_lowercase_hex_digits() {
        for kind in IdKind::ALL {
            let id = new_id(kind.prefix()).unwrap();
            assert_eq!(id.len(), 35, "{id}");
            assert!(id.starts_with(&format!("{}-", kind.prefix())));
            assert_eq!(check_id(kind.prefix(), &id), Ok(id.clone()));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]
        #[test]
        fn the_pattern_accepts_exactly_what_the_check_accepts(
            text in "(ws|ex|fw|sn|tk|mt|xx)-[0-9a-fA-F]{30,34}",
        ) {
            for kind in IdKind::ALL {
                let pattern = regex::Regex::new(&id_pattern(&[kind])).unwrap();
                prop_assert_eq!(pattern.is_match(&text), check_id(kind.prefix(), &text).is_ok());
            }
        }
    }

    #[test]
    fn a_pattern_of_several_kinds_accepts_each_of_them() {
        let kinds = [IdKind::Exec, IdKind::Task];
        let pattern = regex::Regex::new(&id_pattern(&kinds)).unwrap();
        assert_eq!(id_pattern(&kinds), "^(ex|tk)-[0-9a-f]{32}$");
        for kind in kinds {
            assert!(pattern.is_match(&new_id(kind.prefix()).unwrap()));
        }
        assert!(!pattern.is_match(&new_id("ws").unwrap()));
    }

    #[test]
    fn new_ids_do_not_repeat() {
        let ids: HashSet<String> = (0..1000).map(|_| new_id("ws").unwrap()).collect();
        assert_eq!(ids.len(), 1000);
    }

    #[test]
    fn an_unknown_kind_is_named_in_the_error() {
        for call in [new_id("xx"), check_id("xx", "xx-0")] {
            let err = call.unwrap_err();
            assert_eq!(err.rule, "id.kind");
            assert!(err.message.contains("'xx'"), "{}", err.message);
            assert!(err.message.contains("ws"), "{}", err.message);
        }
    }

    #[test]
    fn check_id_rejects_wrong_prefix_and_malformed_digits() {
        let digits = "0123456789abcdef0123456789abcdef";
        let table = [
            (format!("ex-{digits}"), "id.prefix"),
            (format!("WS-{digits}"), "id.prefix"),
            (format!("ws{digits}"), "id.prefix"),
            (format!("ws_{digits}"), "id.prefix"),
            (String::new(), "id.prefix"),
            (format!("ws-{}", digits.to_uppercase()), "id.format"),
            (format!("ws-{digits}0"), "id.format"),
            (format!("ws-{}", &digits[1..]), "id.format"),
            (format!("ws-{digits} "), "id.format"),
            (format!("ws-{}g", &digits[1..]), "id.format"),
            (format!("ws-{}/..", &digits[3..]), "id.format"),
        ];
        for (text, rule) in table {
            let err = check_id("ws", &text).expect_err(&text);
            assert_eq!(err.rule, rule, "{text:?}");
            assert!(
                err.message.contains("workspace id must be 'ws-'"),
                "{}",
                err.message
            );
        }
        let err = check_id("ex", "ex-").expect_err("too short");
        assert!(
            err.message.starts_with("an exec id must be 'ex-'"),
            "{}",
            err.message
        );
        assert_eq!(
            check_id("ws", &format!("ws-{digits}")),
            Ok(format!("ws-{digits}"))
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]

        #[test]
        fn check_id_never_panics_and_accepts_only_canonical_ids(kind in "ws|ex|fw|sn|tk|mt|[a-z]{0,3}", text in any::<String>()) {
            if let Ok(out) = check_id(&kind, &text) {
                prop_assert_eq!(&out, &text);
                prop_assert_eq!(out.len(), 35);
                prop_assert_eq!(check_id(&kind, &out), Ok(out.clone()));
            }
        }

        #[test]
        fn check_id_accepts_any_32_lowercase_hex_digits(kind in "ws|ex|fw|sn|tk|mt", digits in "[0-9a-f]{32}") {
            let id = format!("{kind}-{digits}");
            prop_assert_eq!(check_id(&kind, &id), Ok(id.clone()));
        }
    }
}
