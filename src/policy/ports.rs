//! The TCP ports a workspace declares at its create for previews (`workspace_create(ports=…)`):
//! the only ports a preview URL may reach, on the workspace's own loopback. The same rule holds
//! the agent's `port.connect`, so a port outside it is refused at both ends.
//!
//! 1024 and up: a workspace's commands run as an unprivileged user (on both drivers, unless a
//! Modal workspace asks for root), which cannot listen below 1024, so a lower port could only
//! ever reach a service the workspace's own user did not start. At most [`MAX_PREVIEW_PORTS`]:
//! on Modal each is a tunnel fixed at the sandbox's create, and the list is kept in the
//! workspace's record (one tag of at most 1024 characters).

use super::error::PolicyError;

/// The lowest port a workspace may declare: the first one an unprivileged user may listen on.
pub const MIN_PREVIEW_PORT: u16 = 1024;
/// The most ports one workspace may declare.
pub const MAX_PREVIEW_PORTS: usize = 8;

/// A preview port: a whole number from [`MIN_PREVIEW_PORT`] to 65535.
pub fn preview_port(port: i64) -> Result<u16, PolicyError> {
    u16::try_from(port)
        .ok()
        .filter(|p| *p >= MIN_PREVIEW_PORT)
        .ok_or_else(|| {
            PolicyError::new(
                "port.range",
                format!(
                    "a preview port is a TCP port from {MIN_PREVIEW_PORT} to 65535 (lower ports \
                     need root to listen on, which the workspace's commands do not have)"
                ),
                &port.to_string(),
            )
        })
}

/// The ports a workspace declares, each through [`preview_port`], repeats dropped (the first
/// kept), at most [`MAX_PREVIEW_PORTS`]. A refusal names the entry (`[i]: …`).
pub fn preview_ports(ports: &[i64]) -> Result<Vec<u16>, PolicyError> {
    if ports.len() > MAX_PREVIEW_PORTS {
        return Err(PolicyError::without_echo(
            "port.too-many",
            format!(
                "at most {MAX_PREVIEW_PORTS} ports per workspace (got {})",
                ports.len()
            ),
        ));
    }
    let mut out: Vec<u16> = Vec::with_capacity(ports.len());
    for (i, port) in ports.iter().enumerate() {
        let port = preview_port(*port).map_err(|e| PolicyError {
            rule: e.rule,
            message: format!("[{i}]: {}", e.message),
        })?;
        if !out.contains(&port) {
            out.push(port);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_from_1024_to_65535_are_taken() {
        assert_eq!(preview_port(1024).unwrap(), 1024);
        assert_eq!(preview_port(8000).unwrap(), 8000);
        assert_eq!(preview_port(65535).unwrap(), 65535);
    }

    #[test]
    fn privileged_and_impossible_ports_are_refused() {
        for port in [i64::MIN, -1, 0, 22, 80, 443, 1023, 65536, i64::MAX] {
            let err = preview_port(port).unwrap_err();
            assert_eq!(err.rule, "port.range", "{port}");
            assert!(err.message.contains(&port.to_string()), "{err}");
        }
    }

    #[test]
    fn a_list_drops_repeats_keeps_its_order_and_names_the_entry_at_fault() {
        assert_eq!(preview_ports(&[8000, 3000, 8000]).unwrap(), [8000, 3000]);
        assert_eq!(preview_ports(&[]).unwrap(), Vec::<u16>::new());
        let err = preview_ports(&[8000, 80]).unwrap_err();
        assert_eq!(err.rule, "port.range");
        assert!(err.message.starts_with("[1]: "), "{err}");
    }

    #[test]
    fn at_most_eight_ports() {
        let eight: Vec<i64> = (8000..8008).collect();
        assert_eq!(preview_ports(&eight).unwrap().len(), MAX_PREVIEW_PORTS);
        let nine: Vec<i64> = (8000..8009).collect();
        assert_eq!(preview_ports(&nine).unwrap_err().rule, "port.too-many");
    }
}
