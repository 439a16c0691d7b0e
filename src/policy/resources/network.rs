//! Outbound CIDRs a workspace may reach: parsed strictly, written canonically, and never one that
//! reaches into the provider's own network. A sandbox allowed into private, loopback,
//! link-local or shared ranges could talk to the cloud's metadata service (169.254.169.254,
//! fd00:ec2::254) or to whatever else lives beside it; no workspace needs that, so an entry that
//! overlaps such a range is refused rather than trusted to the provider's defaults.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::policy::error::PolicyError;

/// The ranges no allowlist entry may overlap, and why.
pub const REFUSED_RANGES: [(&str, &str); 19] = [
    ("0.0.0.0/8", "'this network'"),
    ("10.0.0.0/8", "private"),
    (
        "100.64.0.0/10",
        "shared (carrier-grade NAT, cloud-internal services)",
    ),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (cloud metadata services)"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved and broadcast"),
    ("::/127", "unspecified and loopback"),
    (
        "::ffff:0:0/96",
        "IPv4-mapped (write the IPv4 address instead)",
    ),
    ("64:ff9b::/96", "NAT64 (it reaches IPv4 addresses)"),
    ("64:ff9b:1::/48", "local NAT64 (it reaches IPv4 addresses)"),
    ("2002::/16", "6to4 (it reaches IPv4 addresses)"),
    ("fc00::/7", "unique local (cloud metadata services)"),
    ("fe80::/10", "link-local"),
    ("ff00::/8", "multicast"),
];

/// One outbound CIDR (`ADDRESS/PREFIX`, or a single address), in canonical form: the address as
/// Rust writes it (IPv6 compressed, lowercase) and the prefix always present.
pub fn outbound_cidr(text: &str) -> Result<String, PolicyError> {
    let (addr, prefix) = parse(text)?;
    let canonical = network(addr, prefix);
    if canonical != addr {
        return Err(PolicyError::new(
            "cidr.host-bits",
            format!("a CIDR's address must be its network's: did you mean {canonical}/{prefix}?"),
            text,
        ));
    }
    for (range, why) in REFUSED_RANGES {
        let (range_addr, range_prefix) = parse(range)?;
        if overlaps(addr, prefix, range_addr, range_prefix) {
            return Err(PolicyError::new(
                "cidr.refused-range",
                format!(
                    "a CIDR may not reach {range} ({why}); to allow all outbound traffic, leave \
                     the allowlist out"
                ),
                text,
            ));
        }
    }
    Ok(format!("{addr}/{prefix}"))
}

fn parse(text: &str) -> Result<(IpAddr, u8), PolicyError> {
    let what = "a CIDR is an IPv4 or IPv6 address, optionally followed by '/' and a prefix length";
    let (addr_text, prefix_text) = match text.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (text, None),
    };
    // The standard parser refuses leading zeros ("010.0.0.1" is octal to some tools), zone ids
    // and surrounding space, so what passes means one thing everywhere.
    let addr: IpAddr = addr_text
        .parse()
        .map_err(|_| PolicyError::new("cidr.address", what, text))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix_text {
        None => max,
        Some(p) => {
            let digits = !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit());
            let canonical = p == "0" || !p.starts_with('0');
            match p.parse::<u8>() {
                Ok(n) if digits && canonical && n <= max => n,
                _ => {
                    return Err(PolicyError::new(
                        "cidr.prefix",
                        format!("a CIDR's prefix length is a number from 0 to {max}"),
                        text,
                    ))
                }
            }
        }
    };
    Ok((addr, prefix))
}

fn mask(addr: IpAddr, prefix: u8) -> u128 {
    let (bits, width) = match addr {
        IpAddr::V4(a) => (u128::from(u32::from(a)), 32u32),
        IpAddr::V6(a) => (u128::from(a), 128u32),
    };
    let keep = u32::from(prefix);
    if keep == 0 {
        return 0;
    }
    let shift = width - keep;
    bits >> shift << shift
}

fn network(addr: IpAddr, prefix: u8) -> IpAddr {
    let bits = mask(addr, prefix);
    match addr {
        // Masking an IPv4 address leaves it within 32 bits.
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(u32::try_from(bits).unwrap_or(0))),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(bits)),
    }
}

/// Two networks of one family overlap when one holds the other: they agree on the shorter
/// prefix.
fn overlaps(a: IpAddr, a_prefix: u8, b: IpAddr, b_prefix: u8) -> bool {
    if a.is_ipv4() != b.is_ipv4() {
        return false;
    }
    let shorter = a_prefix.min(b_prefix);
    mask(a, shorter) == mask(b, shorter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_networks_pass_in_canonical_form() {
        for (given, canonical) in [
            ("8.8.8.8", "8.8.8.8/32"),
            ("8.8.8.0/24", "8.8.8.0/24"),
            ("140.82.112.0/20", "140.82.112.0/20"),
            ("2606:4700::/32", "2606:4700::/32"),
            ("2001:DB8:0:0::1", "2001:db8::1/128"),
            ("2a00:1450:4001:0000::/64", "2a00:1450:4001::/64"),
            ("11.0.0.0/8", "11.0.0.0/8"),
            ("172.32.0.0/11", "172.32.0.0/11"),
        ] {
            assert_eq!(outbound_cidr(given).unwrap(), canonical, "{given}");
        }
    }

    #[test]
    fn malformed_entries_are_refused() {
        for (bad, rule) in [
            ("", "cidr.address"),
            ("8.8.8", "cidr.address"),
            ("08.8.8.8/32", "cidr.address"),
            (" 8.8.8.8", "cidr.address"),
            ("8.8.8.8/", "cidr.prefix"),
            ("8.8.8.8/33", "cidr.prefix"),
            ("8.8.8.8/024", "cidr.prefix"),
            ("8.8.8.8/+24", "cidr.prefix"),
            ("8.8.8.8/24/1", "cidr.prefix"),
            ("2001:db8::/129", "cidr.prefix"),
            ("fe80::1%eth0", "cidr.address"),
            ("example.com", "cidr.address"),
            ("8.8.8.1/24", "cidr.host-bits"),
        ] {
            assert_eq!(outbound_cidr(bad).unwrap_err().rule, rule, "{bad:?}");
        }
        assert!(outbound_cidr("8.8.8.1/24")
            .unwrap_err()
            .message
            .contains("8.8.8.0/24"));
    }

    #[test]
    fn private_loopback_link_local_and_metadata_ranges_are_refused_also_inside_a_wider_entry() {
        for bad in [
            "10.1.2.0/24",
            "127.0.0.1",
            "169.254.169.254",
            "172.16.0.0/12",
            "192.168.1.1",
            "100.100.100.200",
            "0.0.0.0/0",
            "0.0.0.0/1",
            "::1",
            "::/0",
            "fd00:ec2::254",
            "fe80::/64",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "224.0.0.1",
        ] {
            assert_eq!(
                outbound_cidr(bad).unwrap_err().rule,
                "cidr.refused-range",
                "{bad}"
            );
        }
        let e = outbound_cidr("169.254.169.254").unwrap_err();
        assert!(e.message.contains("metadata"), "{e}");
    }

    #[test]
    fn every_refused_range_is_itself_a_canonical_network() {
        for (range, _) in REFUSED_RANGES {
            let (addr, prefix) = parse(range).unwrap();
            assert_eq!(network(addr, prefix), addr, "{range}");
        }
    }
}
