//! The workspace's processes as `/proc` shows them: every process's `stat`, parsed without
//! trusting it, and the ones that descend from the agent daemon (which supervises every command
//! and, as a subreaper, adopts what they leave behind): those are the workspace's.

use std::collections::HashMap;
use std::path::Path;

use super::bounded::{self, STAT_BYTES};

/// The most processes one scan reads; past it the scan says it is truncated.
pub(crate) const MAX_PROCESSES: usize = 16_384;

/// How far up the parent chain a process is followed (deeper chains are not the workspace's).
const MAX_DEPTH: usize = 1024;

/// One process's `stat`, the fields the sampler uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub(crate) pid: i32,
    /// The command name (`comm`): at most 15 bytes the process itself may set, never its argv.
    pub(crate) comm: String,
    pub(crate) ppid: i32,
    /// Its own CPU time, user and system, in clock ticks.
    pub(crate) ticks: u64,
    /// The CPU time of the children it has waited for, in clock ticks.
    pub(crate) child_ticks: u64,
    /// When it started, in clock ticks after boot: with the pid, it names one process (pids are
    /// reused).
    pub(crate) start: u64,
    pub(crate) rss_pages: u64,
}

/// Parses one `/proc/<pid>/stat`. The name sits in parentheses and may hold anything, spaces
/// and parentheses included, so the fields are read after its last `)`. `None` for anything
/// that does not have the kernel's shape.
pub(crate) fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find(" (")?;
    let close = text.rfind(')')?;
    if close < open {
        return None;
    }
    let pid: i32 = text[..open].parse().ok()?;
    let comm = text.get(open + 2..close)?;
    let fields: Vec<&str> = text.get(close + 1..)?.split_ascii_whitespace().collect();
    // state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime
    // cstime priority nice threads itrealvalue starttime vsize rss: 22 fields at least.
    if fields.len() < 22 || pid <= 0 {
        return None;
    }
    let unsigned = |i: usize| fields[i].parse::<u64>().ok();
    // cutime and cstime are signed in the kernel's format; a negative one counts as nothing.
    let signed = |i: usize| {
        fields[i]
            .parse::<i64>()
            .ok()
            .map(|v| v.max(0).unsigned_abs())
    };
    Some(ProcStat {
        pid,
        comm: bounded::shown_name(comm, 15),
        ppid: fields[1].parse().ok()?,
        ticks: unsigned(11)?.saturating_add(unsigned(12)?),
        child_ticks: signed(13)?.saturating_add(signed(14)?),
        start: unsigned(19)?,
        rss_pages: fields[21].parse::<i64>().ok()?.max(0).unsigned_abs(),
    })
}

/// Every process `proc_root` shows that could be read, and how many could not be parsed.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    pub(crate) procs: Vec<ProcStat>,
    /// `stat` files that did not have the kernel's shape.
    pub(crate) unparsed: u64,
    /// More than [`MAX_PROCESSES`] were there; the rest were not read.
    pub(crate) truncated: bool,
}

/// Reads the `stat` of every process under `proc_root` (`/proc`). A process that ends while it
/// is read is simply missing; one whose `stat` does not parse is counted.
pub(crate) fn scan(proc_root: &Path) -> Scan {
    let mut out = Scan::default();
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if out.procs.len() >= MAX_PROCESSES {
            out.truncated = true;
            break;
        }
        let Ok(read) = bounded::read(&proc_root.join(pid.to_string()).join("stat"), STAT_BYTES)
        else {
            continue; // ended meanwhile, or not ours to read
        };
        match parse_stat(read.text.trim_end()) {
            Some(stat) if !read.truncated && stat.pid.unsigned_abs() == pid => out.procs.push(stat),
            _ => out.unparsed += 1,
        }
    }
    out
}

/// The processes of `procs` that descend from `ancestor` (not `ancestor` itself), leaving out
/// `excluded` and whatever descends from them (the sampler's own helpers).
pub(crate) fn descendants<'a>(
    procs: &'a [ProcStat],
    ancestor: i32,
    excluded: &[i32],
) -> Vec<&'a ProcStat> {
    let parent: HashMap<i32, i32> = procs.iter().map(|p| (p.pid, p.ppid)).collect();
    let mut known: HashMap<i32, bool> = HashMap::new();
    let mut chain = Vec::new();
    procs
        .iter()
        .filter(|p| {
            chain.clear();
            let mut pid = p.pid;
            let verdict = loop {
                if let Some(&v) = known.get(&pid) {
                    break v;
                }
                if excluded.contains(&pid) || pid == ancestor || chain.len() >= MAX_DEPTH {
                    break false;
                }
                chain.push(pid);
                match parent.get(&pid) {
                    Some(&ppid) if ppid == ancestor => break true,
                    // A loop in the table (a pid reused between two reads) ends the walk.
                    Some(&ppid) if ppid > 0 && !chain.contains(&ppid) => pid = ppid,
                    _ => break false,
                }
            };
            for &pid in &chain {
                known.insert(pid, verdict);
            }
            verdict
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat_line(pid: i32, comm: &str, ppid: i32, utime: u64, rss: i64) -> String {
        format!(
            "{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 100 0 0 0 {utime} 5 7 3 20 0 1 0 \
             12345 1000000 {rss} 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0"
        )
    }

    fn proc(pid: i32, ppid: i32) -> ProcStat {
        parse_stat(&stat_line(pid, "p", ppid, 0, 0)).unwrap()
    }

    #[test]
    fn a_stat_line_gives_its_fields() {
        let stat = parse_stat(&stat_line(42, "python3", 7, 95, 76800)).unwrap();
        assert_eq!(
            stat,
            ProcStat {
                pid: 42,
                comm: "python3".into(),
                ppid: 7,
                ticks: 100,
                child_ticks: 10,
                start: 12345,
                rss_pages: 76800,
            }
        );
    }

    #[test]
    fn a_name_with_spaces_and_parentheses_is_read_to_its_last_parenthesis() {
        let stat = parse_stat(&stat_line(9, "a) (b c", 1, 1, 1)).unwrap();
        assert_eq!((stat.comm.as_str(), stat.ppid), ("a) (b c", 1));
        let stat = parse_stat(&stat_line(9, "evil\n\u{7}", 1, 1, 1)).unwrap();
        assert_eq!(stat.comm, "evil??");
    }

    #[test]
    fn garbage_is_refused_without_a_panic() {
        let short = "12 (x) S 1 2 3";
        let negative = stat_line(-3, "x", 1, 1, 1);
        let words = stat_line(3, "x", 1, 1, 1).replace(" 12345 ", " soon ");
        for bad in [
            "", ")", "(", "x (y) z", "12 (x", short, &negative, &words, "\u{0}",
        ] {
            assert_eq!(parse_stat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_workspace_is_what_descends_from_the_daemon() {
        // 1 init, 10 the daemon, 11 and 12 its commands, 13 a grandchild, 20 a stranger,
        // 30 the sampler's helper with its own child 31.
        let procs = [
            proc(1, 0),
            proc(10, 1),
            proc(11, 10),
            proc(12, 10),
            proc(13, 11),
            proc(20, 1),
            proc(30, 10),
            proc(31, 30),
        ];
        let mine: Vec<i32> = descendants(&procs, 10, &[30])
            .iter()
            .map(|p| p.pid)
            .collect();
        assert_eq!(mine, [11, 12, 13]);
    }

    #[test]
    fn a_loop_in_the_parent_table_ends_the_walk() {
        let procs = [proc(5, 6), proc(6, 5), proc(7, 10)];
        let mine: Vec<i32> = descendants(&procs, 10, &[]).iter().map(|p| p.pid).collect();
        assert_eq!(mine, [7]);
    }

    #[test]
    fn a_scan_counts_what_does_not_parse_and_skips_what_is_not_a_process() {
        let root = std::env::temp_dir().join(format!("mwc-proc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (pid, text) in [
            ("1", stat_line(1, "init", 0, 1, 1)),
            ("2", "2 (garbage".to_owned()),
            ("3", stat_line(4, "liar", 1, 1, 1)), // says it is another pid
            ("4", "x".repeat(STAT_BYTES + 10)),
        ] {
            std::fs::create_dir_all(root.join(pid)).unwrap();
            std::fs::write(root.join(pid).join("stat"), text).unwrap();
        }
        std::fs::create_dir_all(root.join("self")).unwrap();
        std::fs::create_dir_all(root.join("5")).unwrap(); // no stat: gone
        let scan = scan(&root);
        assert_eq!(scan.procs.iter().map(|p| p.pid).collect::<Vec<_>>(), [1]);
        assert_eq!(scan.unparsed, 3);
        assert!(!scan.truncated);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn this_process_is_found_in_the_real_proc() {
        let me = i32::try_from(std::process::id()).unwrap();
        let scan = scan(Path::new("/proc"));
        assert!(scan.procs.iter().any(|p| p.pid == me));
    }
}
