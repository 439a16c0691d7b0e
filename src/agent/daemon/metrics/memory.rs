//! The workspace's memory: used, its limit, and the OOM kills the kernel counted. From the
//! daemon's memory cgroup where one is readable (v2: `memory.current`, `memory.max`,
//! `memory.events`; v1: `memory.usage_in_bytes`, `memory.limit_in_bytes`, `memory.oom_control`),
//! else from `/proc/meminfo` and `/proc/vmstat` (the machine's, which is the workspace's where
//! the workspace is the machine). A limit is never above the machine's memory.

use std::path::{Path, PathBuf};

use super::bounded::{self, SMALL_BYTES, TABLE_BYTES};

/// Where memory is read from, found once: the daemon's cgroup does not change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MemorySource {
    CgroupV2(PathBuf),
    CgroupV1(PathBuf),
    Meminfo,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemoryReading {
    pub(crate) used_bytes: u64,
    pub(crate) limit_bytes: Option<u64>,
    pub(crate) oom_kills: Option<u64>,
    pub(crate) source: &'static str,
}

impl MemorySource {
    /// The daemon's memory cgroup under `sys_cgroup` (`/sys/fs/cgroup`) as `self_cgroup`
    /// (`/proc/self/cgroup`) names it, where its files can be read; in a cgroup namespace the
    /// named path may be missing and the mount's root is the cgroup itself.
    pub(crate) fn locate(self_cgroup: &str, sys_cgroup: &Path) -> Self {
        for line in self_cgroup.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Some(relative) = safe_relative(path) else {
                continue;
            };
            if controllers.is_empty() {
                for dir in [sys_cgroup.join(relative), sys_cgroup.to_owned()] {
                    if dir.join("memory.current").is_file() {
                        return Self::CgroupV2(dir);
                    }
                }
            } else if controllers.split(',').any(|c| c == "memory") {
                let base = sys_cgroup.join("memory");
                for dir in [base.join(relative), base.clone()] {
                    if dir.join("memory.usage_in_bytes").is_file() {
                        return Self::CgroupV1(dir);
                    }
                }
            }
        }
        Self::Meminfo
    }

    /// The reading now; `None` when nothing could be read. Files that do not parse add to
    /// `unparsed`.
    pub(crate) fn read(&self, proc_root: &Path, unparsed: &mut u64) -> Option<MemoryReading> {
        let meminfo = bounded::read(&proc_root.join("meminfo"), TABLE_BYTES)
            .ok()
            .map(|r| parse_meminfo(&r.text, unparsed));
        let total = meminfo.and_then(|m| m.0);
        let (used, limit, oom) = match self {
            Self::Meminfo => return machine(proc_root, meminfo, unparsed),
            Self::CgroupV2(dir) => (
                number(&dir.join("memory.current"), unparsed),
                limit(&dir.join("memory.max"), unparsed),
                keyed(
                    &dir.join("memory.events"),
                    "oom_kill",
                    SMALL_BYTES,
                    unparsed,
                ),
            ),
            Self::CgroupV1(dir) => (
                number(&dir.join("memory.usage_in_bytes"), unparsed),
                limit(&dir.join("memory.limit_in_bytes"), unparsed),
                keyed(
                    &dir.join("memory.oom_control"),
                    "oom_kill",
                    SMALL_BYTES,
                    unparsed,
                ),
            ),
        };
        let Some(used) = used else {
            return machine(proc_root, meminfo, unparsed);
        };
        let limit = match (limit.flatten(), total) {
            (Some(cgroup), Some(machine)) => Some(cgroup.min(machine)),
            (cgroup, machine) => cgroup.or(machine),
        };
        Some(MemoryReading {
            used_bytes: used,
            limit_bytes: limit,
            oom_kills: oom,
            source: "cgroup",
        })
    }
}

/// The machine's memory, from `/proc/meminfo` (`MemTotal`, `MemAvailable`) and `/proc/vmstat`.
fn machine(
    proc_root: &Path,
    meminfo: Option<(Option<u64>, Option<u64>)>,
    unparsed: &mut u64,
) -> Option<MemoryReading> {
    let (Some(total), Some(available)) = meminfo? else {
        return None;
    };
    Some(MemoryReading {
        used_bytes: total.saturating_sub(available),
        limit_bytes: Some(total),
        oom_kills: keyed(&proc_root.join("vmstat"), "oom_kill", TABLE_BYTES, unparsed),
        source: "meminfo",
    })
}

/// A cgroup path of `/proc/self/cgroup` as a path relative to the mount: never one that climbs.
fn safe_relative(path: &str) -> Option<&str> {
    let relative = path.strip_prefix('/')?;
    let climbs = relative.split('/').any(|part| part == ".." || part == ".");
    (!climbs).then_some(relative)
}

/// A file holding one number.
fn number(path: &Path, unparsed: &mut u64) -> Option<u64> {
    let text = bounded::read(path, SMALL_BYTES).ok()?.text;
    let parsed = text.trim().parse().ok();
    *unparsed += u64::from(parsed.is_none());
    parsed
}

/// A limit file: a number, or `max` (no limit: `Some(None)`).
fn limit(path: &Path, unparsed: &mut u64) -> Option<Option<u64>> {
    let text = bounded::read(path, SMALL_BYTES).ok()?.text;
    parse_limit(&text).or_else(|| {
        *unparsed += 1;
        None
    })
}

pub(crate) fn parse_limit(text: &str) -> Option<Option<u64>> {
    match text.trim() {
        "max" => Some(None),
        number => number.parse().ok().map(Some),
    }
}

/// The value of `key` in a file of `key value` lines (`memory.events`, `vmstat`).
fn keyed(path: &Path, key: &str, max: usize, unparsed: &mut u64) -> Option<u64> {
    let text = bounded::read(path, max).ok()?.text;
    parse_keyed(&text, key, unparsed)
}

pub(crate) fn parse_keyed(text: &str, key: &str, unparsed: &mut u64) -> Option<u64> {
    let line = text
        .lines()
        .find(|line| line.split_ascii_whitespace().next() == Some(key))?;
    let value = line
        .split_ascii_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok());
    *unparsed += u64::from(value.is_none());
    value
}

/// `MemTotal` and `MemAvailable` of `/proc/meminfo`, in bytes.
pub(crate) fn parse_meminfo(text: &str, unparsed: &mut u64) -> (Option<u64>, Option<u64>) {
    let mut total = None;
    let mut available = None;
    for line in text.lines() {
        let slot = match line.split(':').next() {
            Some("MemTotal") => &mut total,
            Some("MemAvailable") => &mut available,
            _ => continue,
        };
        let mut words = line
            .split(':')
            .nth(1)
            .unwrap_or("")
            .split_ascii_whitespace();
        let value = match (words.next().map(str::parse::<u64>), words.next()) {
            (Some(Ok(kib)), Some("kB")) => kib.checked_mul(1024),
            _ => None,
        };
        *unparsed += u64::from(value.is_none());
        *slot = value;
    }
    (total, available)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:       24683568 kB\nMemFree:        13299228 kB\n\
                           MemAvailable:   22987132 kB\nBuffers:          177516 kB\n";

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mwc-mem-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn meminfo_gives_the_total_and_what_is_available() {
        let mut unparsed = 0;
        let got = parse_meminfo(MEMINFO, &mut unparsed);
        assert_eq!(got, (Some(24_683_568 * 1024), Some(22_987_132 * 1024)));
        let garbage = "MemTotal: lots\nMemAvailable: 1 MB\nnonsense\n";
        assert_eq!(parse_meminfo(garbage, &mut unparsed), (None, None));
        assert_eq!(unparsed, 2);
    }

    #[test]
    fn keyed_values_and_limits_parse_or_are_counted() {
        let mut unparsed = 0;
        let events = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n";
        assert_eq!(parse_keyed(events, "oom_kill", &mut unparsed), Some(2));
        assert_eq!(parse_keyed("oom_kill x\n", "oom_kill", &mut unparsed), None);
        assert_eq!(parse_keyed("other 1\n", "oom_kill", &mut unparsed), None);
        assert_eq!(unparsed, 1);
        assert_eq!(parse_limit("max\n"), Some(None));
        assert_eq!(parse_limit("1073741824\n"), Some(Some(1 << 30)));
        assert_eq!(parse_limit("-1"), None);
    }

    #[test]
    fn a_v2_cgroup_is_found_and_read_with_the_limit_bounded_by_the_machine() {
        let sys = temp("v2");
        let proc_root = temp("v2-proc");
        std::fs::write(proc_root.join("meminfo"), MEMINFO).unwrap();
        let dir = sys.join("workspace.slice");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memory.current"), "314572800\n").unwrap();
        std::fs::write(dir.join("memory.max"), "max\n").unwrap();
        std::fs::write(dir.join("memory.events"), "oom 1\noom_kill 1\n").unwrap();
        let source = MemorySource::locate("0::/workspace.slice\n", &sys);
        assert_eq!(source, MemorySource::CgroupV2(dir.clone()));
        let mut unparsed = 0;
        let got = source.read(&proc_root, &mut unparsed).unwrap();
        let expected = MemoryReading {
            used_bytes: 300 << 20,
            limit_bytes: Some(24_683_568 * 1024),
            oom_kills: Some(1),
            source: "cgroup",
        };
        assert_eq!(got, expected);
        std::fs::write(dir.join("memory.max"), "1073741824\n").unwrap();
        let got = source.read(&proc_root, &mut unparsed).unwrap();
        assert_eq!(got.limit_bytes, Some(1 << 30));
        assert_eq!(unparsed, 0);
        for dir in [sys, proc_root] {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }

    #[test]
    fn a_v1_cgroup_at_the_mount_root_is_found() {
        let sys = temp("v1");
        let dir = sys.join("memory");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("memory.usage_in_bytes"), "1\n").unwrap();
        let source = MemorySource::locate("4:memory:/somewhere/else\n0::/\n", &sys);
        assert_eq!(source, MemorySource::CgroupV1(dir));
        std::fs::remove_dir_all(sys).unwrap();
    }

    #[test]
    fn without_a_readable_cgroup_the_machine_is_read() {
        let sys = temp("none");
        let proc_root = temp("none-proc");
        std::fs::write(proc_root.join("meminfo"), MEMINFO).unwrap();
        std::fs::write(proc_root.join("vmstat"), "pgfault 9\noom_kill 4\n").unwrap();
        let source = MemorySource::locate("0::/../../etc\ngarbage\n", &sys);
        assert_eq!(source, MemorySource::Meminfo);
        let mut unparsed = 0;
        let got = source.read(&proc_root, &mut unparsed).unwrap();
        assert_eq!(got.used_bytes, (24_683_568 - 22_987_132) * 1024);
        assert_eq!((got.oom_kills, got.source), (Some(4), "meminfo"));
        for dir in [sys, proc_root] {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}
