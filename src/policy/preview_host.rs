//! The host names previews are served on: one origin per workspace and port, so that an app a
//! workspace serves (its scripts are workspace output, hostile) is kept by the browser's
//! same-origin policy from the gateway's own pages and from every other preview.
//!
//! The operator names a zone, a DNS name whose every subdomain reaches the gateway (a wildcard
//! record; `localhost` needs none, browsers resolve every `*.localhost` name to loopback). A
//! preview of port `P` of workspace `ws-H` is served at `p-H-P.<zone>`: one label of at most
//! [`MAX_PREVIEW_LABEL_CHARS`] characters, within DNS's 63. The gateway reads a request's `Host`
//! with [`preview_host_target`]: a name outside the zone is the gateway's own; one inside it is
//! a preview only when it is exactly such a label (canonical: lowercase hex, the port without
//! leading zeros), so each workspace and port has one name and no other.

use super::error::PolicyError;
use super::id::check_id;
use super::ports::preview_port;

/// What a preview's label starts with.
const LABEL_PREFIX: &str = "p-";
/// The longest preview label: `p-`, 32 hex digits, `-`, a port of five digits.
pub const MAX_PREVIEW_LABEL_CHARS: usize = 40;
const MAX_LABEL_CHARS: usize = 63;
/// The longest zone: a preview's name (its label, a dot, the zone) stays within DNS's 253.
pub const MAX_PREVIEW_HOST_CHARS: usize = 253 - MAX_PREVIEW_LABEL_CHARS - 1;
/// The longest `Host` header value read (a name, a colon, a port).
const MAX_HOST_HEADER_CHARS: usize = 253 + 6;

/// The operator's preview zone (`MODAL_WORKSPACE_PREVIEW_HOST`): a DNS name of one or more
/// labels (`localhost`, `preview.example.com`), canonical (lowercase, no trailing dot).
pub fn preview_host(text: &str) -> Result<String, PolicyError> {
    let what = format!(
        "the preview host is a DNS name (labels of letters, digits and '-', at most \
         {MAX_PREVIEW_HOST_CHARS} characters) whose every subdomain reaches the gateway, such as \
         localhost or preview.example.com: the name itself, without '*.', a scheme or a port"
    );
    let lower = text.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= MAX_LABEL_CHARS
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if name.len() > MAX_PREVIEW_HOST_CHARS || !name.split('.').all(label_ok) {
        return Err(PolicyError::new("preview-host.shape", what, text));
    }
    // A last label of digits only makes an IP address, which has no subdomains.
    if name
        .rsplit('.')
        .next()
        .is_some_and(|tld| tld.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(PolicyError::new(
            "preview-host.address",
            "the preview host is a name with subdomains, not an address",
            text,
        ));
    }
    Ok(name.to_owned())
}

/// The host name a preview of `port` of `workspace_id` is served on, under the zone `host`.
pub fn preview_origin_host(
    host: &str,
    workspace_id: &str,
    port: i64,
) -> Result<String, PolicyError> {
    let zone = preview_host(host)?;
    let id = check_id("ws", workspace_id)?;
    let port = preview_port(port)?;
    let digits = id.strip_prefix("ws-").unwrap_or(&id);
    Ok(format!("{LABEL_PREFIX}{digits}-{port}.{zone}"))
}

/// What a request's `Host` names, seen from a gateway whose preview zone is `zone` (canonical,
/// as [`preview_host`] answers it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostTarget {
    /// Not a name under the zone: the gateway's own pages.
    Gateway,
    /// A preview's name: the workspace and port it stands for.
    Preview { workspace_id: String, port: u16 },
}

/// Reads a `Host` header value (`name`, `name:port`, `[address]:port`): [`HostTarget::Gateway`]
/// for a name outside `zone`, the preview it names for a preview name, and an error (rule
/// `preview-host.label`) for any other name under the zone, which reaches nothing.
pub fn preview_host_target(host: &str, zone: &str) -> Result<HostTarget, PolicyError> {
    let refused = || {
        PolicyError::without_echo(
            "preview-host.label",
            "no preview is served on this host name",
        )
    };
    if host.len() > MAX_HOST_HEADER_CHARS || host.starts_with('[') {
        // Too long to be a name the gateway handed out, or an IPv6 address: not under the zone.
        return Ok(HostTarget::Gateway);
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => name,
        Some(_) => return Ok(HostTarget::Gateway),
        None => host,
    };
    let lower = name.to_ascii_lowercase();
    let name = lower.strip_suffix('.').unwrap_or(&lower);
    let Some(label) = name
        .strip_suffix(zone)
        .and_then(|rest| rest.strip_suffix('.'))
    else {
        return Ok(HostTarget::Gateway);
    };
    let (digits, port) = label
        .strip_prefix(LABEL_PREFIX)
        .and_then(|rest| rest.split_once('-'))
        .ok_or_else(refused)?;
    let workspace_id = check_id("ws", &format!("ws-{digits}")).map_err(|_| refused())?;
    // The port as the gateway writes it (no sign, no leading zero): one name per preview.
    if port.is_empty()
        || port.len() > 5
        || port.starts_with('0')
        || !port.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(refused());
    }
    let port = port
        .parse::<i64>()
        .ok()
        .and_then(|p| preview_port(p).ok())
        .ok_or_else(refused)?;
    Ok(HostTarget::Preview { workspace_id, port })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const WS: &str = "ws-0123456789abcdef0123456789abcdef";
    const LABEL: &str = "p-0123456789abcdef0123456789abcdef";

    #[test]
    fn zones_are_names_with_subdomains() {
        for (text, canonical) in [
            ("localhost", "localhost"),
            ("LocalHost.", "localhost"),
            ("preview.example.com", "preview.example.com"),
            ("x-1.example", "x-1.example"),
        ] {
            assert_eq!(preview_host(text).as_deref(), Ok(canonical), "{text}");
        }
        let long = format!("{}.com", "a.".repeat(110));
        for (text, rule) in [
            ("", "preview-host.shape"),
            ("*.example.com", "preview-host.shape"),
            ("http://localhost", "preview-host.shape"),
            ("localhost:8765", "preview-host.shape"),
            ("-a.example", "preview-host.shape"),
            ("a..example", "preview-host.shape"),
            ("exämple.com", "preview-host.shape"),
            (long.as_str(), "preview-host.shape"),
            ("127.0.0.1", "preview-host.address"),
            ("10", "preview-host.address"),
        ] {
            assert_eq!(preview_host(text).map_err(|e| e.rule), Err(rule), "{text}");
        }
    }

    #[test]
    fn a_preview_name_is_one_label_within_dns_limits() {
        let name = preview_origin_host("localhost", WS, 65535).unwrap();
        assert_eq!(name, format!("{LABEL}-65535.localhost"));
        let label = name.split('.').next().unwrap();
        assert_eq!(label.len(), MAX_PREVIEW_LABEL_CHARS);
        let zone =
            "a".repeat(63) + "." + &"b".repeat(63) + "." + &"c".repeat(63) + "." + &"d".repeat(20);
        assert_eq!(zone.len(), MAX_PREVIEW_HOST_CHARS);
        assert_eq!(preview_origin_host(&zone, WS, 65535).unwrap().len(), 253);
        assert!(preview_host(&(zone + "d")).is_err());
        assert_eq!(
            preview_origin_host("localhost", "ws-x", 8000)
                .unwrap_err()
                .rule,
            "id.format"
        );
        assert_eq!(
            preview_origin_host("localhost", WS, 80).unwrap_err().rule,
            "port.range"
        );
    }

    #[test]
    fn a_host_header_names_the_gateway_or_one_preview() {
        let preview = HostTarget::Preview {
            workspace_id: WS.to_owned(),
            port: 8000,
        };
        for host in [
            format!("{LABEL}-8000.localhost:8765"),
            format!("{LABEL}-8000.localhost"),
            format!("{}-8000.LOCALHOST.:80", LABEL.to_uppercase()),
        ] {
            assert_eq!(
                preview_host_target(&host, "localhost"),
                Ok(preview.clone()),
                "{host}"
            );
        }
        for host in [
            "localhost:8765",
            "127.0.0.1:8765",
            "[::1]:8765",
            "gateway.example.com",
            "notlocalhost:8765",
            "evil.example:x",
        ] {
            assert_eq!(
                preview_host_target(host, "localhost"),
                Ok(HostTarget::Gateway),
                "{host}"
            );
        }
        for host in [
            format!("{LABEL}-08000.localhost"),
            format!("{LABEL}-+8000.localhost"),
            format!("{LABEL}-80.localhost"),
            format!("{LABEL}-70000.localhost"),
            format!("{LABEL}-8000.a.localhost"),
            format!("x.{LABEL}-8000.localhost"),
            format!("{LABEL}0-8000.localhost"),
            format!("{LABEL}.localhost"),
            "p--8000.localhost".to_owned(),
            "www.localhost:8765".to_owned(),
            ".localhost".to_owned(),
        ] {
            let err = preview_host_target(&host, "localhost").unwrap_err();
            assert_eq!(err.rule, "preview-host.label", "{host}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(crate::policy::tests::test_cases()))]

        #[test]
        fn every_name_read_back_is_the_one_written(digits in "[0-9a-f]{32}", port in 1024i64..=65535, host in any::<String>()) {
            let id = format!("ws-{digits}");
            let name = preview_origin_host("preview.example.com", &id, port).unwrap();
            let read = preview_host_target(&name, "preview.example.com").unwrap();
            prop_assert_eq!(read, HostTarget::Preview { workspace_id: id, port: port as u16 });
            // Any other header never panics, and a preview it names is written back the same.
            if let Ok(HostTarget::Preview { workspace_id, port }) = preview_host_target(&host, "localhost") {
                let written = preview_origin_host("localhost", &workspace_id, i64::from(port)).unwrap();
                let name = host.to_ascii_lowercase();
                let name = name.rsplit_once(':').map_or(name.as_str(), |(n, _)| n).trim_end_matches('.');
                prop_assert_eq!(written, name);
            }
        }
    }
}
