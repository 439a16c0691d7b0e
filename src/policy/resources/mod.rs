//! What a workspace may ask of its machine beyond the defaults: CPU and memory requests with
//! their hard limits, a GPU, where it runs, and the only places its outbound traffic may go.
//! Each rule returns the canonical value the Modal driver sends, or a [`PolicyError`]; the
//! caller names the `resources.*` field (a list's rule names the entry by its index).

mod compute;
mod domain;
mod gpu;
mod network;
mod region;

pub use compute::{
    cpu_cores, cpu_limit, memory_limit_mib, memory_mib, MAX_CPU_CORES, MAX_MEMORY_MIB,
    MIN_CPU_CORES, MIN_MEMORY_MIB,
};
pub use domain::{outbound_domain, MAX_DOMAIN_CHARS};
pub use gpu::{allowed_gpu, gpu, gpu_allowlist, GPU_TYPES, MAX_GPU_COUNT};
pub use network::{outbound_cidr, REFUSED_RANGES};
pub use region::{region, MAX_REGION_CHARS};

use super::error::PolicyError;

/// The most entries of each list (regions, CIDRs, domains): the workspace's record of its
/// resources lives in one Modal tag of at most 1024 characters.
pub const MAX_LIST_ENTRIES: usize = 16;
/// The most regions a workspace may name.
pub const MAX_REGIONS: usize = 8;

/// The regions a workspace may run in, canonical (lowercase) and without repeats.
pub fn regions<S: AsRef<str>>(list: &[S]) -> Result<Vec<String>, PolicyError> {
    if list.is_empty() {
        return Err(PolicyError::without_echo(
            "region.empty",
            "name at least one region, or leave it out to run anywhere",
        ));
    }
    checked_list(list, MAX_REGIONS, region)
}

/// A workspace's outbound allowlists, CIDRs then domains; `None` where none was given.
pub type Allowlists = (Option<Vec<String>>, Option<Vec<String>>);

/// The outbound allowlists of a workspace. Either may be absent (`None`); an empty list is an
/// allowlist with nothing on it. Modal cannot combine either with a blocked network; the
/// message of that refusal names the list at fault.
pub fn outbound_allowlists<S: AsRef<str>>(
    block_network: bool,
    cidrs: Option<&[S]>,
    domains: Option<&[S]>,
) -> Result<Allowlists, PolicyError> {
    if block_network && (cidrs.is_some() || domains.is_some()) {
        let field = if cidrs.is_some() {
            "outbound_cidr_allowlist"
        } else {
            "outbound_domain_allowlist"
        };
        return Err(PolicyError::without_echo(
            "network.blocked-allowlist",
            format!(
                "a workspace with block_network has no outbound traffic to allow: leave out \
                 block_network or resources.{field}"
            ),
        ));
    }
    let cidrs = cidrs
        .map(|l| checked_list(l, MAX_LIST_ENTRIES, outbound_cidr))
        .transpose()?;
    let domains = domains
        .map(|l| checked_list(l, MAX_LIST_ENTRIES, outbound_domain))
        .transpose()?;
    Ok((cidrs, domains))
}

/// Each entry through `rule`, repeats dropped (first kept); at most `max` entries given. A
/// refusal says which entry (`[i]: …`).
fn checked_list<S: AsRef<str>>(
    list: &[S],
    max: usize,
    rule: fn(&str) -> Result<String, PolicyError>,
) -> Result<Vec<String>, PolicyError> {
    if list.len() > max {
        return Err(PolicyError::without_echo(
            "resources.too-many",
            format!("at most {max} entries (got {})", list.len()),
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let canonical = rule(entry.as_ref()).map_err(|e| PolicyError {
            rule: e.rule,
            message: format!("[{i}]: {}", e.message),
        })?;
        if !out.contains(&canonical) {
            out.push(canonical);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_canonical_without_repeats_and_name_the_entry_at_fault() {
        assert_eq!(
            regions(&["US-East", "us-east", "eu-west"]).unwrap(),
            ["us-east", "eu-west"]
        );
        let e = regions(&["us-east", "us east"]).unwrap_err();
        assert!(e.message.starts_with("[1]: "), "{e}");
        let (cidrs, domains) =
            outbound_allowlists(false, Some(&["8.8.8.0/24", "8.8.8.0/24"][..]), None).unwrap();
        assert_eq!(cidrs.unwrap(), ["8.8.8.0/24"]);
        assert_eq!(domains, None);
    }

    #[test]
    fn an_empty_allowlist_is_kept_as_one_that_allows_nothing() {
        let none: [&str; 0] = [];
        let (cidrs, domains) = outbound_allowlists(false, Some(&none[..]), None).unwrap();
        assert_eq!(cidrs, Some(vec![]));
        assert_eq!(domains, None);
    }

    #[test]
    fn counts_are_bounded() {
        let many: Vec<String> = (0..=MAX_LIST_ENTRIES)
            .map(|i| format!("8.8.{i}.0/24"))
            .collect();
        let e = outbound_allowlists(false, Some(&many[..]), None).unwrap_err();
        assert_eq!(e.rule, "resources.too-many");
        let full = &many[..MAX_LIST_ENTRIES];
        let (cidrs, _) = outbound_allowlists(false, Some(full), None).unwrap();
        assert_eq!(
            cidrs.map(|c| c.len()),
            Some(MAX_LIST_ENTRIES),
            "the bound itself is taken"
        );
        let regions_given: Vec<String> =
            (0..=MAX_REGIONS).map(|i| format!("us-east-{i}")).collect();
        assert_eq!(
            regions(&regions_given).unwrap_err().rule,
            "resources.too-many"
        );
        let none: [&str; 0] = [];
        assert_eq!(regions(&none).unwrap_err().rule, "region.empty");
    }

    #[test]
    fn a_blocked_network_takes_no_allowlist() {
        let e = outbound_allowlists(true, None, Some(&["github.com"][..])).unwrap_err();
        assert_eq!(e.rule, "network.blocked-allowlist");
        assert!(e.message.contains("outbound_domain_allowlist"), "{e}");
        assert!(outbound_allowlists::<&str>(true, None, None).is_ok());
    }
}
