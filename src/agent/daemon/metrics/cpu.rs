//! CPU use between two scans of the workspace's processes: the total as percent of one core, and
//! the top processes by CPU with their name (never their argv: it may hold secrets) and RSS.
//!
//! The total counts, besides every live process's own time, the time of the children each has
//! waited for, and the time of the children the daemon reaped itself (its `cutime`): a command
//! that ran and ended between two samples is still counted, and as a process's time moves into
//! its parent's when it is reaped, the total never runs backwards.

use std::collections::HashMap;
use std::time::Instant;

use serde_json::{json, Value};

use super::processes::{descendants, ProcStat, Scan};

/// How many processes a sample lists by CPU.
pub(crate) const TOP: usize = 5;

/// What one scan gave, against the scan before it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CpuSample {
    /// Percent of one core, over the time between the two scans.
    pub(crate) percent: f64,
    pub(crate) top: Vec<TopProcess>,
    /// How many processes the workspace runs.
    pub(crate) processes: usize,
    /// Their resident memory together.
    pub(crate) rss_bytes: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TopProcess {
    pub(crate) pid: i32,
    pub(crate) name: String,
    pub(crate) cpu_percent: f64,
    pub(crate) rss_bytes: u64,
}

impl CpuSample {
    pub(crate) fn top_json(&self) -> Value {
        Value::Array(
            self.top
                .iter()
                .map(|p| {
                    json!({
                        "pid": p.pid,
                        "name": p.name,
                        "cpu_percent": round1(p.cpu_percent),
                        "rss_bytes": p.rss_bytes,
                    })
                })
                .collect(),
        )
    }
}

/// One decimal is all a percentage needs, and it keeps samples small.
pub(crate) fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

/// The scan before, to measure the next one against.
pub(crate) struct CpuTracker {
    ticks_per_second: f64,
    page_bytes: u64,
    /// Each process's own ticks, by pid and start time (a reused pid is another process).
    before: HashMap<(i32, u64), u64>,
    total_before: Option<(u64, Instant)>,
}

impl CpuTracker {
    pub(crate) fn new(ticks_per_second: u64, page_bytes: u64) -> Self {
        Self {
            ticks_per_second: ticks_per_second.max(1) as f64,
            page_bytes,
            before: HashMap::new(),
            total_before: None,
        }
    }

    /// Takes a scan made `at`: the processes descending from `daemon` (but not from `excluded`,
    /// the sampler's own helpers) are the workspace's. `None` for the first scan, which only
    /// sets the baseline.
    pub(crate) fn observe(
        &mut self,
        scan: &Scan,
        daemon: i32,
        excluded: &[i32],
        at: Instant,
    ) -> Option<CpuSample> {
        let mine = descendants(&scan.procs, daemon, excluded);
        let reaped = scan
            .procs
            .iter()
            .find(|p| p.pid == daemon)
            .map_or(0, |p| p.child_ticks);
        let total = mine.iter().fold(reaped, |sum, p| {
            sum.saturating_add(p.ticks.saturating_add(p.child_ticks))
        });
        let before = std::mem::take(&mut self.before);
        self.before = mine.iter().map(|p| ((p.pid, p.start), p.ticks)).collect();
        let (total_before, then) = self.total_before.replace((total, at))?;
        let seconds = at.saturating_duration_since(then).as_secs_f64();
        if seconds <= 0.0 {
            return None;
        }
        let percent = |ticks: u64| ticks as f64 / self.ticks_per_second / seconds * 100.0;
        let mut top: Vec<TopProcess> = mine
            .iter()
            .map(|p| {
                // A process not seen before started since: all its time is in this interval.
                let was = before.get(&(p.pid, p.start)).copied().unwrap_or(0);
                TopProcess {
                    pid: p.pid,
                    name: p.comm.clone(),
                    cpu_percent: percent(p.ticks.saturating_sub(was)),
                    rss_bytes: self.rss(p),
                }
            })
            .collect();
        top.sort_by(|a, b| {
            b.cpu_percent
                .total_cmp(&a.cpu_percent)
                .then(b.rss_bytes.cmp(&a.rss_bytes))
                .then(a.pid.cmp(&b.pid))
        });
        top.truncate(TOP);
        Some(CpuSample {
            percent: percent(total.saturating_sub(total_before)),
            top,
            processes: mine.len(),
            rss_bytes: mine
                .iter()
                .fold(0u64, |sum, p| sum.saturating_add(self.rss(p))),
        })
    }

    fn rss(&self, p: &ProcStat) -> u64 {
        p.rss_pages.saturating_mul(self.page_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn proc(pid: i32, ppid: i32, ticks: u64, child_ticks: u64, rss_pages: u64) -> ProcStat {
        ProcStat {
            pid,
            comm: format!("p{pid}"),
            ppid,
            ticks,
            child_ticks,
            start: 1000 + pid.unsigned_abs() as u64,
            rss_pages,
        }
    }

    fn scan(procs: Vec<ProcStat>) -> Scan {
        Scan {
            procs,
            ..Scan::default()
        }
    }

    #[test]
    fn the_first_scan_is_the_baseline_and_the_next_measures_against_it() {
        let mut cpu = CpuTracker::new(100, 4096);
        let t0 = Instant::now();
        let first = scan(vec![proc(10, 1, 500, 0, 1), proc(11, 10, 100, 0, 10)]);
        assert_eq!(cpu.observe(&first, 10, &[], t0), None);
        // Two seconds later 11 used 1.5 s of CPU, and 12 started and used 0.5 s.
        let second = scan(vec![
            proc(10, 1, 900, 0, 1),
            proc(11, 10, 250, 0, 76_800),
            proc(12, 10, 50, 0, 10),
        ]);
        let got = cpu
            .observe(&second, 10, &[], t0 + Duration::from_secs(2))
            .unwrap();
        assert_eq!(
            got.percent, 100.0,
            "2 s of CPU in 2 s; the daemon's own time is not counted"
        );
        assert_eq!(got.processes, 2);
        assert_eq!(got.rss_bytes, (76_800 + 10) * 4096);
        let top: Vec<(i32, f64)> = got.top.iter().map(|p| (p.pid, p.cpu_percent)).collect();
        assert_eq!(top, [(11, 75.0), (12, 25.0)]);
        assert_eq!(got.top[0].name, "p11");
        assert_eq!(got.top[0].rss_bytes, 300 << 20);
    }

    #[test]
    fn a_command_that_ended_between_scans_is_counted_through_the_daemon() {
        let mut cpu = CpuTracker::new(100, 4096);
        let t0 = Instant::now();
        cpu.observe(
            &scan(vec![proc(10, 1, 0, 0, 0), proc(11, 10, 100, 0, 0)]),
            10,
            &[],
            t0,
        );
        // 11 used 50 more ticks, ended and was reaped: its 150 ticks are the daemon's cutime.
        let after = scan(vec![proc(10, 1, 0, 150, 0)]);
        let got = cpu
            .observe(&after, 10, &[], t0 + Duration::from_secs(1))
            .unwrap();
        assert_eq!(got.percent, 50.0);
        assert_eq!((got.processes, got.top.len()), (0, 0));
    }

    #[test]
    fn a_reused_pid_is_another_process_and_the_top_is_bounded() {
        let mut cpu = CpuTracker::new(100, 4096);
        let t0 = Instant::now();
        cpu.observe(
            &scan(vec![proc(10, 1, 0, 0, 0), proc(11, 10, 900, 0, 0)]),
            10,
            &[],
            t0,
        );
        let mut reused = proc(11, 10, 20, 0, 0);
        reused.start += 1;
        let mut procs = vec![proc(10, 1, 0, 0, 0), reused];
        procs.extend((20..30).map(|pid| proc(pid, 10, 1, 0, 0)));
        let got = cpu
            .observe(&scan(procs), 10, &[], t0 + Duration::from_secs(1))
            .unwrap();
        assert_eq!(got.top.len(), TOP);
        assert_eq!((got.top[0].pid, got.top[0].cpu_percent), (11, 20.0));
        assert_eq!(got.processes, 11);
    }

    #[test]
    fn the_helpers_of_the_sampler_are_left_out() {
        let mut cpu = CpuTracker::new(100, 4096);
        let t0 = Instant::now();
        let procs = |t| scan(vec![proc(10, 1, 0, 0, 0), proc(30, 10, t, 0, 0)]);
        cpu.observe(&procs(0), 10, &[30], t0);
        let got = cpu
            .observe(&procs(100), 10, &[30], t0 + Duration::from_secs(1))
            .unwrap();
        assert_eq!((got.percent, got.processes), (0.0, 0));
    }

    #[test]
    fn the_top_list_is_json_with_one_decimal() {
        let sample = CpuSample {
            percent: 0.0,
            top: vec![TopProcess {
                pid: 7,
                name: "x".into(),
                cpu_percent: 33.333,
                rss_bytes: 1,
            }],
            processes: 1,
            rss_bytes: 1,
        };
        assert_eq!(
            sample.top_json(),
            json!([{"pid": 7, "name": "x", "cpu_percent": 33.3, "rss_bytes": 1}])
        );
    }
}
