//! Outbound domain names a workspace may reach (Modal's `outbound_domain_allowlist`): DNS names
//! in lowercase ASCII, optionally `*.` for every name below one, never a name that stands for the
//! machine itself or its provider's internal network.

use crate::policy::error::PolicyError;

/// Longest domain name (DNS's limit), without a trailing dot.
pub const MAX_DOMAIN_CHARS: usize = 253;
const MAX_LABEL_CHARS: usize = 63;
/// Names that reach the sandbox itself or its provider's internal network (the metadata
/// service is `metadata.google.internal` on one cloud), never a public host.
const REFUSED_SUFFIXES: [&str; 5] = ["localhost", "local", "internal", "arpa", "home.arpa"];

/// One allowlisted domain: `example.com` or `*.example.com`, canonical (lowercase, no trailing
/// dot).
pub fn outbound_domain(text: &str) -> Result<String, PolicyError> {
    let what = "a domain is a DNS name of two or more labels (letters, digits, '-'), optionally \
                starting with '*.' for every name below it; write a non-ASCII name in its \
                xn-- form";
    if text == "*" {
        return Err(PolicyError::new(
            "domain.everything",
            "'*' allows every domain; to allow all outbound traffic, leave the allowlist out",
            text,
        ));
    }
    let lower = text.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    let (wildcard, host) = match name.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, name),
    };
    let labels: Vec<&str> = host.split('.').collect();
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.len() <= MAX_LABEL_CHARS
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if name.len() > MAX_DOMAIN_CHARS || labels.len() < 2 || !labels.iter().all(label_ok) {
        return Err(PolicyError::new("domain.shape", what, text));
    }
    // A last label of digits only makes an IP address, not a name.
    if labels
        .last()
        .is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(PolicyError::new(
            "domain.address",
            "an address is not a domain: put it in resources.outbound_cidr_allowlist",
            text,
        ));
    }
    if let Some(suffix) = REFUSED_SUFFIXES
        .iter()
        .find(|s| host == **s || host.ends_with(&format!(".{s}")))
    {
        return Err(PolicyError::new(
            "domain.internal",
            format!("a name under .{suffix} reaches the machine or its provider, not the internet"),
            text,
        ));
    }
    Ok(if wildcard {
        format!("*.{host}")
    } else {
        host.to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_wildcards_pass_canonical() {
        for (given, canonical) in [
            ("github.com", "github.com"),
            ("GitHub.com.", "github.com"),
            ("*.githubusercontent.com", "*.githubusercontent.com"),
            ("pypi.org", "pypi.org"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("a-b.c1.io", "a-b.c1.io"),
        ] {
            assert_eq!(outbound_domain(given).unwrap(), canonical, "{given}");
        }
    }

    #[test]
    fn other_shapes_are_refused() {
        for (bad, rule) in [
            ("*", "domain.everything"),
            ("", "domain.shape"),
            ("com", "domain.shape"),
            ("*.com", "domain.shape"),
            ("a..com", "domain.shape"),
            ("-a.com", "domain.shape"),
            ("a-.com", "domain.shape"),
            ("a_b.com", "domain.shape"),
            ("*a.com", "domain.shape"),
            ("a.*.com", "domain.shape"),
            ("bücher.de", "domain.shape"),
            ("github.com/x", "domain.shape"),
            ("github.com:443", "domain.shape"),
            ("https://github.com", "domain.shape"),
            ("8.8.8.8", "domain.address"),
            ("localhost", "domain.shape"),
            ("my.localhost", "domain.internal"),
            ("metadata.google.internal", "domain.internal"),
            ("*.internal.", "domain.shape"),
            ("printer.local", "domain.internal"),
            ("254.169.254.169.in-addr.arpa", "domain.internal"),
        ] {
            assert_eq!(outbound_domain(bad).unwrap_err().rule, rule, "{bad:?}");
        }
        let long = format!("{}.com", "a.".repeat(125));
        assert_eq!(outbound_domain(&long).unwrap_err().rule, "domain.shape");
        let label = format!("{}.com", "a".repeat(64));
        assert_eq!(outbound_domain(&label).unwrap_err().rule, "domain.shape");
    }

    #[test]
    fn a_name_of_exactly_253_characters_and_a_label_of_63_pass() {
        // Three labels of 63 and one of 61, with their dots: 253, the DNS limit.
        let longest = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "b".repeat(61));
        assert_eq!(longest.len(), 253);
        assert_eq!(outbound_domain(&longest).as_deref(), Ok(longest.as_str()));
        let over = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "b".repeat(62));
        assert_eq!(outbound_domain(&over).unwrap_err().rule, "domain.shape");
    }
}
