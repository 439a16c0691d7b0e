//! One sample: every source read once and put together as the fields of a `metrics` event,
//! within the bound on an event's fields (the GPUs' process lists, then GPUs, give way first).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::bounded::{self, SMALL_BYTES, TABLE_BYTES};
use super::cpu::{round1, CpuTracker};
use super::disk::Disk;
use super::gpu::{program, GpuSource};
use super::memory::MemorySource;
use super::network::parse_net_dev;
use super::processes;
use crate::event::MAX_FIELDS_JSON;

/// What the sampler reads from, opened once.
pub(crate) struct Sources {
    proc_root: PathBuf,
    daemon: i32,
    cores: usize,
    cpu: CpuTracker,
    memory: MemorySource,
    disk: Option<Disk>,
    gpu: Option<GpuSource>,
    /// Lines and files of `/proc` and the cgroup that did not parse, since the start.
    unparsed: u64,
}

impl Sources {
    /// The sources of the workspace at `root`, with `nvidia-smi` looked for on `path_var`
    /// (started at `interval` when found), and a first scan of the processes as the baseline.
    pub(crate) fn open(
        root: &Path,
        path_var: Option<&std::ffi::OsStr>,
        interval: Duration,
    ) -> Self {
        let proc_root = PathBuf::from("/proc");
        let self_cgroup = bounded::read(&proc_root.join("self/cgroup"), SMALL_BYTES)
            .map(|r| r.text)
            .unwrap_or_default();
        let gpu = program::find(program::NVIDIA_SMI, path_var, root)
            .map(|smi| GpuSource::start(smi, interval));
        let mut sources = Self {
            daemon: i32::try_from(std::process::id()).unwrap_or(i32::MAX),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu: CpuTracker::new(clock_ticks(), page_bytes()),
            memory: MemorySource::locate(&self_cgroup, Path::new("/sys/fs/cgroup")),
            disk: Disk::open(root)
                .map_err(|e| tracing::warn!(error = %e, "the workspace's disk is not sampled"))
                .ok(),
            gpu,
            unparsed: 0,
            proc_root,
        };
        sources.scan(Instant::now());
        sources
    }

    pub(crate) fn set_interval(&self, interval: Duration) {
        if let Some(gpu) = &self.gpu {
            gpu.set_interval(interval);
        }
    }

    pub(crate) fn stop(&mut self) {
        if let Some(gpu) = &mut self.gpu {
            gpu.stop();
        }
    }

    fn scan(&mut self, at: Instant) -> (Option<super::cpu::CpuSample>, bool) {
        let scan = processes::scan(&self.proc_root);
        self.unparsed = self.unparsed.saturating_add(scan.unparsed);
        let helpers = self
            .gpu
            .as_ref()
            .map(GpuSource::helper_pids)
            .unwrap_or_default();
        (
            self.cpu.observe(&scan, self.daemon, &helpers, at),
            scan.truncated,
        )
    }

    /// The fields of one `metrics` event, sampled now at `interval`.
    pub(crate) fn sample(&mut self, interval: Duration) -> Map<String, Value> {
        let now = Instant::now();
        let mut fields = Map::new();
        fields.insert("interval_seconds".into(), json!(interval.as_secs_f64()));
        let (cpu, truncated) = self.scan(now);
        if truncated {
            // More processes than a scan reads: the figures count the first ones only.
            fields.insert("processes_truncated".into(), json!(true));
        }
        let mut cpu_json =
            json!({"percent": cpu.as_ref().map(|c| round1(c.percent)), "cores": self.cores});
        if let Some(cpu) = &cpu {
            cpu_json["top"] = cpu.top_json();
            fields.insert("processes".into(), json!(cpu.processes));
        }
        fields.insert("cpu".into(), cpu_json);
        let mut memory = match self.memory.read(&self.proc_root, &mut self.unparsed) {
            Some(m) => json!({
                "used_bytes": m.used_bytes,
                "limit_bytes": m.limit_bytes,
                "oom_kills": m.oom_kills,
                "source": m.source,
            }),
            None => json!({}),
        };
        if let Some(cpu) = &cpu {
            memory["rss_bytes"] = json!(cpu.rss_bytes);
        }
        fields.insert("memory".into(), memory);
        if let Some(disk) = self.disk.as_ref().and_then(|d| d.read().ok()) {
            fields.insert(
                "disk".into(),
                json!({
                    "total_bytes": disk.total_bytes,
                    "used_bytes": disk.used_bytes,
                    "free_bytes": disk.free_bytes,
                }),
            );
        }
        if let Ok(read) = bounded::read(&self.proc_root.join("net/dev"), TABLE_BYTES) {
            let net = parse_net_dev(&read.text, &mut self.unparsed);
            self.unparsed += u64::from(read.truncated);
            fields.insert(
                "network".into(),
                json!({"rx_bytes": net.rx_bytes, "tx_bytes": net.tx_bytes}),
            );
        }
        if let Some(gpu) = &self.gpu {
            let snapshot = gpu.snapshot(now);
            if let Some(gpus) = snapshot.gpus {
                fields.insert("gpus".into(), Value::Array(gpus));
            }
            fields.insert("gpu_garbage_lines".into(), json!(snapshot.garbage_lines));
        }
        fields.insert("unparsed_lines".into(), json!(self.unparsed));
        fit(&mut fields, MAX_FIELDS_JSON - 256);
        fields
    }
}

impl Drop for Sources {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Makes the fields' JSON at most `max` bytes: first without the GPUs' process lists, then
/// with fewer GPUs (saying so in `gpus_truncated`).
pub(crate) fn fit(fields: &mut Map<String, Value>, max: usize) {
    let size =
        |fields: &Map<String, Value>| serde_json::to_string(fields).map_or(usize::MAX, |s| s.len());
    if size(fields) <= max {
        return;
    }
    if let Some(Value::Array(gpus)) = fields.get_mut("gpus") {
        for gpu in gpus.iter_mut() {
            if let Some(gpu) = gpu.as_object_mut() {
                gpu.remove("processes");
            }
        }
    }
    while size(fields) > max {
        let Some(Value::Array(gpus)) = fields.get_mut("gpus") else {
            return;
        };
        if gpus.pop().is_none() {
            return;
        }
        fields.insert("gpus_truncated".into(), json!(true));
    }
}

/// Clock ticks per second, the unit of a process's CPU times in `/proc`.
fn clock_ticks() -> u64 {
    // SAFETY: sysconf reads a system constant; it has no preconditions and touches no memory.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// The size of a memory page, the unit of a process's RSS in `/proc/<pid>/stat`.
fn page_bytes() -> u64 {
    // SAFETY: as above.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_of_this_machine_has_every_source_it_can_read() {
        let root = std::env::temp_dir();
        let mut sources = Sources::open(&root, None, Duration::from_millis(500));
        std::thread::sleep(Duration::from_millis(50));
        let fields = sources.sample(Duration::from_millis(500));
        assert_eq!(fields["interval_seconds"], 0.5);
        assert!(fields["cpu"]["percent"].as_f64().is_some(), "{fields:?}");
        assert!(fields["cpu"]["cores"].as_u64().unwrap() >= 1);
        assert!(fields["cpu"]["top"].is_array());
        assert!(
            fields["memory"]["used_bytes"].as_u64().unwrap() > 0,
            "{fields:?}"
        );
        assert!(fields["disk"]["total_bytes"].as_u64().unwrap() > 0);
        assert!(fields.contains_key("processes") && fields.contains_key("unparsed_lines"));
        assert!(
            !fields.contains_key("gpus"),
            "no nvidia-smi was given: no GPU field"
        );
        assert!(!fields.contains_key("gpu_garbage_lines"));
        crate::event::Fields::new(&fields).expect("a sample is valid event fields");
    }

    #[test]
    fn a_sample_too_large_loses_the_gpus_processes_then_gpus() {
        let gpu = |i: u32| json!({"index": i, "uuid": "x".repeat(96), "processes": [{"pid": 1, "name": "y".repeat(200)}]});
        let mut fields = Map::new();
        fields.insert("gpus".into(), Value::Array((0..8).map(gpu).collect()));
        let mut no_processes = fields.clone();
        fit(&mut no_processes, 1500);
        let gpus = no_processes["gpus"].as_array().unwrap();
        assert_eq!(gpus.len(), 8);
        assert!(gpus.iter().all(|g| g.get("processes").is_none()));
        assert!(!no_processes.contains_key("gpus_truncated"));
        fit(&mut fields, 600);
        assert!(serde_json::to_string(&fields).unwrap().len() <= 600);
        assert!(fields["gpus"].as_array().unwrap().len() < 8);
        assert_eq!(fields["gpus_truncated"], true);
    }
}
