//! A workspace's GPU in Modal's names (`T4`, `H100:2`), and the operator's allowlist of them.
//!
//! The SDK passes `gpu=` on upper-cased, with its count, and leaves the names to Modal's service
//! (`parse_gpu_config` in `modal/_utils/function_utils.py`); the types and bounds here are those
//! of Modal's GPU guide, so that a name Modal would refuse, a count past what one of its machines
//! holds, or a type the operator did not allow is refused before any call to Modal.
//!
//! The allowlist (`MODAL_WORKSPACE_ALLOWED_GPUS`) reads `T4,H100:2`: entries separated by
//! commas, each a type, optionally with the most of it one workspace may ask for. A type alone
//! allows any count up to Modal's bound for it; an empty allowlist allows no GPU at all.

use super::super::error::{echo, PolicyError};

/// Modal's GPU types a workspace may ask for, as Modal writes them, with the most of each that
/// one container may have (Modal's guide: up to 8, the A10 up to 4). Modal's `H100!`, `B200+`
/// and `RTX-PRO-6000` are left out: this product offers the types its documentation names.
pub const GPU_TYPES: [(&str, u32); 10] = [
    ("T4", 8),
    ("L4", 8),
    ("A10", 4),
    ("L40S", 8),
    ("A100", 8),
    ("A100-40GB", 8),
    ("A100-80GB", 8),
    ("H100", 8),
    ("H200", 8),
    ("B200", 8),
];
/// The most GPUs of any type one workspace may ask for.
pub const MAX_GPU_COUNT: u32 = 8;
/// Older names Modal still takes for a type above (it does not tell the A10G from the A10).
const ALIASES: [(&str, &str); 1] = [("A10G", "A10")];
/// Longest GPU request or allowlist entry accepted (`A100-80GB:8` has 11).
const MAX_GPU_CHARS: usize = 32;

/// A type and, where one was written, its count.
type Parsed = (&'static str, u32, Option<u32>);

/// Modal's name and bound for `name` (any case, aliases included).
fn gpu_type(name: &str) -> Option<(&'static str, u32)> {
    let upper = name.to_ascii_uppercase();
    let name = ALIASES
        .iter()
        .find(|(alias, _)| *alias == upper)
        .map_or(upper.as_str(), |(_, of)| *of);
    GPU_TYPES.iter().copied().find(|(known, _)| *known == name)
}

fn types_text() -> String {
    GPU_TYPES
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `TYPE` or `TYPE:N`: the type's name and bound, and N where it was written (1 to the bound,
/// digits only, no leading zero: the SDK's `int()` would also take `+2`, ` 2` or `0_2`).
fn parse(text: &str) -> Result<Parsed, PolicyError> {
    let (name, count) = match text.split_once(':') {
        Some((name, count)) => (name, Some(count)),
        None => (text, None),
    };
    let known = if text.len() <= MAX_GPU_CHARS {
        gpu_type(name)
    } else {
        None
    };
    let Some((kind, bound)) = known else {
        return Err(PolicyError::new(
            "gpu.type",
            format!(
                "a GPU is one of Modal's types {}, optionally with a count (H100:2)",
                types_text()
            ),
            text,
        ));
    };
    let Some(count) = count else {
        return Ok((kind, bound, None));
    };
    let digits = !count.is_empty()
        && count.len() <= 2
        && !count.starts_with('0')
        && count.bytes().all(|b| b.is_ascii_digit());
    match count.parse::<u32>() {
        Ok(n) if digits && n <= bound => Ok((kind, bound, Some(n))),
        _ => Err(PolicyError::new(
            "gpu.count",
            format!("a GPU count is a whole number from 1 to {bound} for {kind} (Modal's bound)"),
            text,
        )),
    }
}

/// A workspace's GPU request: `TYPE` or `TYPE:N`, the type in any case, returned as Modal
/// writes it without a count of 1 (`h100:1` is `H100`, `a10g:2` is `A10:2`).
pub fn gpu(text: &str) -> Result<String, PolicyError> {
    let (kind, _, count) = parse(text)?;
    Ok(match count {
        Some(n) if n > 1 => format!("{kind}:{n}"),
        _ => kind.to_owned(),
    })
}

/// The allowlist setting's entries, canonical: `TYPE` (any count up to Modal's bound) or
/// `TYPE:N` (at most N, kept even when N is 1). Each type is listed once; empty entries (a
/// trailing comma) are skipped.
pub fn gpu_allowlist(text: &str) -> Result<Vec<String>, PolicyError> {
    let mut out: Vec<String> = Vec::new();
    let mut kinds: Vec<&str> = Vec::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (kind, _, count) = parse(entry).map_err(|e| {
            PolicyError::without_echo(e.rule, format!("entry {}: {}", echo(entry), e.message))
        })?;
        if kinds.contains(&kind) {
            return Err(PolicyError::without_echo(
                "allowlist.duplicate",
                format!(
                    "entry {}: {kind} is listed twice; list it once, with the most a workspace \
                     may ask for (H100:2) or alone for any count",
                    echo(entry)
                ),
            ));
        }
        kinds.push(kind);
        out.push(count.map_or_else(|| kind.to_owned(), |n| format!("{kind}:{n}")));
    }
    Ok(out)
}

/// What `allowlist` allows, for a refusal's message: `T4 (up to 8), H100 (up to 2)`.
fn allowed_text(entries: &[Parsed]) -> String {
    entries
        .iter()
        .map(|(kind, bound, count)| format!("{kind} (up to {})", count.unwrap_or(*bound)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks a GPU request against the allowlist `allowlist` (entries as `gpu_allowlist` returns
/// them), the value of the setting called `setting`; returns the request canonical. Deny by
/// default: an empty allowlist allows no GPU. The message lists what is allowed (GPU types
/// are no secret) and names the setting an operator changes.
pub fn allowed_gpu<S: AsRef<str>>(
    request: &str,
    allowlist: &[S],
    setting: &str,
) -> Result<String, PolicyError> {
    let canonical = gpu(request)?;
    let (kind, _, count) = parse(&canonical)?;
    let count = count.unwrap_or(1);
    // The settings were checked at start; an entry that does not parse allows nothing.
    let entries: Vec<Parsed> = allowlist
        .iter()
        .filter_map(|e| parse(e.as_ref()).ok())
        .collect();
    if entries.is_empty() {
        return Err(PolicyError::new(
            "allowlist.denied",
            format!(
                "no GPU is allowed here: an operator lists the types workspaces may ask for in \
                 the {setting} setting (T4,H100:2)"
            ),
            &canonical,
        ));
    }
    let Some((_, bound, most)) = entries.iter().find(|(k, _, _)| *k == kind) else {
        return Err(PolicyError::new(
            "allowlist.denied",
            format!(
                "this GPU type is not allowed here; {setting} allows {}",
                allowed_text(&entries)
            ),
            &canonical,
        ));
    };
    let most = most.unwrap_or(*bound);
    if count > most {
        return Err(PolicyError::new(
            "allowlist.count",
            format!(
                "at most {most} {kind} may be asked for here; {setting} allows {}",
                allowed_text(&entries)
            ),
            &canonical,
        ));
    }
    Ok(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SETTING: &str = "GPU_ALLOWLIST";

    #[test]
    fn modals_types_pass_as_modal_writes_them() {
        for (name, _) in GPU_TYPES {
            assert_eq!(gpu(name).unwrap(), name);
            assert_eq!(gpu(&name.to_ascii_lowercase()).unwrap(), name);
        }
        assert_eq!(gpu("l40s").unwrap(), "L40S");
        assert_eq!(gpu("a100-80gb:4").unwrap(), "A100-80GB:4");
        assert_eq!(gpu("A10G").unwrap(), "A10", "Modal's older name of the A10");
    }

    #[test]
    fn a_count_of_one_is_the_type_alone() {
        assert_eq!(gpu("H100:1").unwrap(), "H100");
        assert_eq!(gpu("H100:2").unwrap(), "H100:2");
        assert_eq!(gpu("B200:8").unwrap(), "B200:8");
    }

    #[test]
    fn counts_stay_within_modals_bound_for_the_type() {
        assert_eq!(gpu("A10:4").unwrap(), "A10:4");
        for bad in [
            "A10:5",
            "A10G:5",
            "H100:9",
            "T4:0",
            "T4:",
            "T4:08",
            "T4:+2",
            "T4: 2",
            "T4:2 ",
            "T4:1_0",
            "T4:2:1",
            "T4:-1",
            "T4:99999999999",
            "T4:²",
        ] {
            assert_eq!(gpu(bad).unwrap_err().rule, "gpu.count", "{bad:?}");
        }
        let e = gpu("A10:5").unwrap_err();
        assert!(e.message.contains("from 1 to 4 for A10"), "{e}");
    }

    #[test]
    fn anything_else_is_refused_listing_modals_types() {
        for bad in [
            "",
            "any",
            "A100-40G",
            "H100!",
            "B200+",
            "RTX-PRO-6000",
            "K80",
            " T4",
            "T4 ",
            "T 4",
            ":2",
            "H100\n",
            "Т4",
            &"H".repeat(40),
        ] {
            let e = gpu(bad).unwrap_err();
            assert_eq!(e.rule, "gpu.type", "{bad:?}");
            assert!(e.message.contains("T4, L4, A10, L40S"), "{e}");
        }
    }

    #[test]
    fn the_allowlist_reads_types_with_or_without_their_most() {
        assert_eq!(
            gpu_allowlist(" t4 , H100:2,a10g:1,"),
            Ok(vec!["T4".into(), "H100:2".into(), "A10:1".into()])
        );
        assert_eq!(gpu_allowlist(""), Ok(vec![]));
        assert_eq!(gpu_allowlist(" , ,"), Ok(vec![]));
    }

    #[test]
    fn bad_allowlist_entries_are_refused_naming_the_entry() {
        for (bad, rule) in [
            ("T4,V100", "gpu.type"),
            ("H100:9", "gpu.count"),
            ("H100:0", "gpu.count"),
            ("T4,t4:2", "allowlist.duplicate"),
            ("A10,A10G", "allowlist.duplicate"),
        ] {
            let e = gpu_allowlist(bad).unwrap_err();
            assert_eq!(e.rule, rule, "{bad:?}");
            assert!(e.message.starts_with("entry '"), "{e}");
        }
    }

    #[test]
    fn an_empty_allowlist_allows_no_gpu() {
        let none: [&str; 0] = [];
        let e = allowed_gpu("T4", &none, SETTING).unwrap_err();
        assert_eq!(e.rule, "allowlist.denied");
        assert!(e.message.contains(SETTING), "{e}");
    }

    #[test]
    fn a_listed_type_is_allowed_up_to_its_most() {
        let list = gpu_allowlist("T4,H100:2").unwrap();
        assert_eq!(allowed_gpu("t4:8", &list, SETTING).unwrap(), "T4:8");
        assert_eq!(allowed_gpu("H100", &list, SETTING).unwrap(), "H100");
        assert_eq!(allowed_gpu("h100:2", &list, SETTING).unwrap(), "H100:2");
        let e = allowed_gpu("H100:3", &list, SETTING).unwrap_err();
        assert_eq!(e.rule, "allowlist.count");
        assert!(e.message.contains("at most 2 H100"), "{e}");
    }

    #[test]
    fn a_type_off_the_list_is_refused_listing_what_is_allowed() {
        let list = gpu_allowlist("T4,H100:2").unwrap();
        for other in ["A100", "A100-80GB", "H200:1"] {
            let e = allowed_gpu(other, &list, SETTING).unwrap_err();
            assert_eq!(e.rule, "allowlist.denied", "{other}");
            assert!(
                e.message
                    .contains("GPU_ALLOWLIST allows T4 (up to 8), H100 (up to 2)"),
                "{e}"
            );
        }
        // The request's own rules come first: a bad count is a bad request, not a denial.
        assert_eq!(
            allowed_gpu("T4:9", &list, SETTING).unwrap_err().rule,
            "gpu.count"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]

        #[test]
        fn whatever_passes_is_canonical_and_within_bounds(text in any::<String>()) {
            if let Ok(canonical) = gpu(&text) {
                prop_assert_eq!(gpu(&canonical), Ok(canonical.clone()));
                let (kind, count) = canonical.split_once(':').unwrap_or((&canonical, "1"));
                let bound = GPU_TYPES.iter().find(|(k, _)| *k == kind).map(|(_, b)| *b);
                prop_assert!(bound.is_some());
                let count: u32 = count.parse().map_err(|_| TestCaseError::fail("count"))?;
                prop_assert!((1..=bound.unwrap_or(0)).contains(&count));
                prop_assert!(count <= MAX_GPU_COUNT);
            }
        }

        #[test]
        fn a_request_is_allowed_exactly_when_an_entry_of_its_type_covers_its_count(
            request in (0..GPU_TYPES.len(), 1..=MAX_GPU_COUNT),
            entries in prop::collection::btree_map(0..GPU_TYPES.len(), prop::option::of(1..=MAX_GPU_COUNT), 0..4),
        ) {
            let (kind, bound) = GPU_TYPES[request.0];
            let text = format!("{kind}:{}", request.1);
            let list = entries
                .iter()
                .map(|(i, most)| match most {
                    Some(n) => format!("{}:{}", GPU_TYPES[*i].0, n.min(&GPU_TYPES[*i].1)),
                    None => GPU_TYPES[*i].0.to_owned(),
                })
                .collect::<Vec<_>>()
                .join(",");
            let list = gpu_allowlist(&list).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let covered = entries.get(&request.0).map(|most| {
                request.1 <= most.map_or(bound, |n| n.min(bound))
            });
            let got = allowed_gpu(&text, &list, SETTING);
            if request.1 > bound {
                prop_assert_eq!(got.map_err(|e| e.rule), Err("gpu.count"));
            } else if covered == Some(true) {
                prop_assert_eq!(got, gpu(&text));
            } else {
                prop_assert!(got.is_err());
            }
        }
    }
}
