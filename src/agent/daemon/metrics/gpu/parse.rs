//! The lines `nvidia-smi` prints in CSV without header or units, parsed without trusting them:
//! one GPU per line of `--query-gpu` (the fields of [`GPU_QUERY`]), one process per line of
//! `--query-compute-apps` (those of [`APPS_QUERY`]). A value the GPU cannot give (`[N/A]`,
//! `[Not Supported]`, any bracketed word) is absent; a line of any other shape is garbage, to be
//! ignored and counted. And the table of what was read, where a GPU that stops being reported
//! leaves the list once its last reading is stale.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::super::bounded::shown_name;
use super::super::cpu::round1;

/// The fields asked of each GPU, in the order [`parse_gpu`] reads them.
pub(crate) const GPU_QUERY: &str =
    "index,uuid,name,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw";
/// The fields asked of each process using a GPU, in the order [`parse_app`] reads them.
pub(crate) const APPS_QUERY: &str = "gpu_uuid,pid,process_name,used_memory";

/// The longest uuid or name kept (characters).
const MAX_TEXT: usize = 96;
/// The longest process name kept, as long as a process's own `comm`.
const MAX_PROCESS_NAME: usize = 15;
/// Processes listed per GPU (those using the most memory).
pub(crate) const MAX_PROCESSES_PER_GPU: usize = 4;
/// Memory figures are MiB without units.
const MIB: f64 = 1024.0 * 1024.0;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GpuReading {
    pub(crate) index: u32,
    pub(crate) uuid: String,
    pub(crate) name: String,
    pub(crate) utilization_percent: Option<f64>,
    pub(crate) memory_used_bytes: Option<u64>,
    pub(crate) memory_total_bytes: Option<u64>,
    pub(crate) temperature_celsius: Option<f64>,
    pub(crate) power_watts: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AppReading {
    pub(crate) gpu_uuid: String,
    pub(crate) pid: u32,
    pub(crate) name: String,
    pub(crate) memory_used_bytes: Option<u64>,
}

/// What one line was.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Line<T> {
    Reading(T),
    /// Nothing to read (an empty line, or the words `nvidia-smi` prints when no process uses
    /// a GPU).
    Nothing,
    Garbage,
}

/// A number field: `Some(None)` when the GPU cannot say (`[N/A]`, `N/A`, `[Not Supported]`),
/// `None` when the field is no number at all (the line is garbage).
fn value(field: &str) -> Option<Option<f64>> {
    let field = field.trim();
    if field == "N/A" || (field.starts_with('[') && field.ends_with(']')) {
        return Some(None);
    }
    let number: f64 = field.parse().ok()?;
    (0.0..1e15).contains(&number).then_some(Some(number))
}

fn mib_to_bytes(mib: Option<f64>) -> Option<u64> {
    // In range: `value` admits only finite numbers from 0 below 1e15 (MiB), which fit a u64
    // once multiplied; `as` saturates anyway.
    mib.map(|m| (m * MIB).round() as u64)
}

/// A text field: not empty, kept short and without control characters.
fn text(field: &str) -> Option<String> {
    let field = field.trim();
    (!field.is_empty()).then(|| shown_name(field, MAX_TEXT))
}

/// Splits a line of `n` fields whose text field at `text_at` may itself hold commas (a GPU's
/// name, a process's path): the fields before and after it are fixed, it takes the rest.
fn fields(line: &str, n: usize, text_at: usize) -> Option<Vec<String>> {
    let parts: Vec<&str> = line.split(',').collect();
    if parts.len() < n {
        return None;
    }
    let tail = n - text_at - 1;
    let mut out: Vec<String> = parts[..text_at].iter().map(|s| (*s).to_owned()).collect();
    out.push(parts[text_at..parts.len() - tail].join(","));
    out.extend(parts[parts.len() - tail..].iter().map(|s| (*s).to_owned()));
    Some(out)
}

/// One line of `--query-gpu=`[`GPU_QUERY`].
pub(crate) fn parse_gpu(line: &str) -> Line<GpuReading> {
    if line.trim().is_empty() {
        return Line::Nothing;
    }
    let parse = || {
        let f = fields(line, 8, 2)?;
        Some(GpuReading {
            index: f[0].trim().parse().ok()?,
            uuid: text(&f[1])?,
            name: text(&f[2])?,
            utilization_percent: value(&f[3])?,
            memory_used_bytes: mib_to_bytes(value(&f[4])?),
            memory_total_bytes: mib_to_bytes(value(&f[5])?),
            temperature_celsius: value(&f[6])?,
            power_watts: value(&f[7])?,
        })
    };
    parse().map_or(Line::Garbage, Line::Reading)
}

/// One line of `--query-compute-apps=`[`APPS_QUERY`]. The process's name is shown as its last
/// path component, as short as a process name.
pub(crate) fn parse_app(line: &str) -> Line<AppReading> {
    let trimmed = line.trim();
    if trimmed.is_empty() || trimmed.starts_with("No running") {
        return Line::Nothing;
    }
    let parse = || {
        let f = fields(line, 4, 2)?;
        let path = f[2].trim();
        let base = path.rsplit('/').next().unwrap_or(path);
        Some(AppReading {
            gpu_uuid: text(&f[0])?,
            pid: f[1].trim().parse().ok().filter(|&pid| pid > 0)?,
            name: shown_name(base, MAX_PROCESS_NAME),
            memory_used_bytes: mib_to_bytes(value(&f[3])?),
        })
    };
    parse().map_or(Line::Garbage, Line::Reading)
}

/// The newest reading of each thing a feed reports, with when it came: one that has not been
/// reported again for `max_age` is gone (a GPU that fell off the bus, a process that ended).
#[derive(Debug)]
pub(crate) struct Table<K, V> {
    entries: HashMap<K, (V, Instant)>,
    /// More things than this are not kept: a feed that invents keys cannot grow the table.
    max_entries: usize,
}

impl<K: Eq + Hash, V> Table<K, V> {
    pub(crate) fn new(max_entries: usize) -> Self {
        Self {
            entries: HashMap::new(),
            max_entries,
        }
    }

    pub(crate) fn put(&mut self, key: K, value: V, at: Instant) {
        if self.entries.len() >= self.max_entries && !self.entries.contains_key(&key) {
            return;
        }
        self.entries.insert(key, (value, at));
    }

    /// Forgets what is older than `max_age` at `now`; the rest, in no order.
    pub(crate) fn current(&mut self, now: Instant, max_age: Duration) -> Vec<&V> {
        self.entries
            .retain(|_, (_, at)| now.saturating_duration_since(*at) <= max_age);
        self.entries.values().map(|(v, _)| v).collect()
    }
}

/// The GPUs as a sample lists them, by index, each with the processes using it (those using the
/// most memory first).
pub(crate) fn gpus_json(gpus: &[&GpuReading], apps: &[&AppReading]) -> Vec<Value> {
    let mut gpus = gpus.to_vec();
    gpus.sort_by(|a, b| a.index.cmp(&b.index).then(a.uuid.cmp(&b.uuid)));
    gpus.into_iter()
        .map(|gpu| {
            let mut mine: Vec<&&AppReading> =
                apps.iter().filter(|a| a.gpu_uuid == gpu.uuid).collect();
            mine.sort_by(|a, b| {
                b.memory_used_bytes
                    .cmp(&a.memory_used_bytes)
                    .then(a.pid.cmp(&b.pid))
            });
            let processes: Vec<Value> = mine
                .iter()
                .take(MAX_PROCESSES_PER_GPU)
                .map(|a| json!({"pid": a.pid, "name": a.name, "memory_used_bytes": a.memory_used_bytes}))
                .collect();
            let mut out = Map::new();
            out.insert("index".into(), json!(gpu.index));
            out.insert("uuid".into(), json!(gpu.uuid));
            out.insert("name".into(), json!(gpu.name));
            let rounded = |v: Option<f64>| v.map(round1);
            out.insert(
                "utilization_percent".into(),
                json!(rounded(gpu.utilization_percent)),
            );
            out.insert("memory_used_bytes".into(), json!(gpu.memory_used_bytes));
            out.insert("memory_total_bytes".into(), json!(gpu.memory_total_bytes));
            out.insert(
                "temperature_celsius".into(),
                json!(rounded(gpu.temperature_celsius)),
            );
            out.insert("power_watts".into(), json!(rounded(gpu.power_watts)));
            out.insert("processes".into(), Value::Array(processes));
            Value::Object(out)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every GPU of a block of `--query-gpu` lines, and how many lines were garbage.
    fn parse_gpus(text: &str) -> (Vec<GpuReading>, u64) {
        let mut gpus = Vec::new();
        let mut garbage = 0;
        for line in text.lines() {
            match parse_gpu(line) {
                Line::Reading(gpu) => gpus.push(gpu),
                Line::Nothing => {}
                Line::Garbage => garbage += 1,
            }
        }
        (gpus, garbage)
    }

    fn line(index: u32) -> String {
        format!(
            "{index}, GPU-0000000{index}-1111-2222-3333-444444444444, NVIDIA H200, 37, 1024, \
             143771, 45, 74.52"
        )
    }

    #[test]
    fn one_gpu() {
        let (gpus, garbage) = parse_gpus(&format!("{}\n", line(0)));
        assert_eq!(garbage, 0);
        assert_eq!(
            gpus,
            [GpuReading {
                index: 0,
                uuid: "GPU-00000000-1111-2222-3333-444444444444".into(),
                name: "NVIDIA H200".into(),
                utilization_percent: Some(37.0),
                memory_used_bytes: Some(1 << 30),
                memory_total_bytes: Some(143_771 << 20),
                temperature_celsius: Some(45.0),
                power_watts: Some(74.52),
            }]
        );
    }

    #[test]
    fn eight_gpus() {
        let text: String = (0..8).map(|i| line(i) + "\n").collect();
        let (gpus, garbage) = parse_gpus(&text);
        assert_eq!(garbage, 0);
        assert_eq!(
            gpus.iter().map(|g| g.index).collect::<Vec<_>>(),
            (0..8).collect::<Vec<_>>()
        );
    }

    #[test]
    fn values_the_gpu_cannot_give_are_absent() {
        let text = "0, GPU-a, Tesla T4, [N/A], 10, 15360, [Not Supported], [Unknown Error]\n\
                    1, GPU-b, Tesla T4, N/A, [N/A], [N/A], 30, 70.00\n";
        let (gpus, garbage) = parse_gpus(text);
        assert_eq!(garbage, 0);
        assert_eq!(gpus[0].utilization_percent, None);
        assert_eq!(gpus[0].memory_used_bytes, Some(10 << 20));
        assert_eq!(
            (gpus[0].temperature_celsius, gpus[0].power_watts),
            (None, None)
        );
        assert_eq!(
            (gpus[1].memory_used_bytes, gpus[1].power_watts),
            (None, Some(70.0))
        );
    }

    #[test]
    fn garbage_lines_are_ignored_and_counted() {
        let text = format!(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n\
             \n{}\n0, GPU-a, name, x, 1, 2, 3, 4\n-1, GPU-a, name, 1, 1, 2, 3, 4\n\
             0, , name, 1, 1, 2, 3, 4\n0, GPU-a, name, 1, -5, 2, 3, 4\n1, 2, 3\n\
             0, GPU-a, name, 1, 1, 2, 3, inf\n\u{0}\u{1}\u{2}\n",
            line(3)
        );
        let (gpus, garbage) = parse_gpus(&text);
        assert_eq!(gpus.iter().map(|g| g.index).collect::<Vec<_>>(), [3]);
        assert_eq!(garbage, 8);
    }

    #[test]
    fn a_name_with_commas_keeps_them_and_control_characters_do_not_survive() {
        let (gpus, garbage) = parse_gpus("2, GPU-c, Weird, Inc. \u{1b}[2J GPU, 1, 2, 3, 4, 5\n");
        assert_eq!(garbage, 0);
        assert_eq!(gpus[0].name, "Weird, Inc. ?[2J GPU");
        assert_eq!(gpus[0].index, 2);
    }

    #[test]
    fn compute_apps_are_read_by_their_last_path_component() {
        let got = parse_app("GPU-a, 4242, /opt/venv/bin/python3.11, 2048");
        assert_eq!(
            got,
            Line::Reading(AppReading {
                gpu_uuid: "GPU-a".into(),
                pid: 4242,
                name: "python3.11".into(),
                memory_used_bytes: Some(2 << 30),
            })
        );
        assert_eq!(parse_app("No running processes found"), Line::Nothing);
        assert_eq!(parse_app("GPU-a, 0, x, 1"), Line::Garbage);
        assert_eq!(parse_app("GPU-a, 12, [Not Found], [N/A]").clone(), {
            Line::Reading(AppReading {
                gpu_uuid: "GPU-a".into(),
                pid: 12,
                name: "[Not Found]".into(),
                memory_used_bytes: None,
            })
        });
        assert_eq!(parse_app("what"), Line::Garbage);
    }

    #[test]
    fn a_gpu_that_stops_being_reported_leaves_the_list() {
        let mut table = Table::new(64);
        let t0 = Instant::now();
        let age = Duration::from_secs(5);
        let (both, _) = parse_gpus(&format!("{}\n{}\n", line(0), line(1)));
        for gpu in both {
            table.put(gpu.uuid.clone(), gpu, t0);
        }
        let later = t0 + Duration::from_secs(4);
        let (one, _) = parse_gpus(&format!("{}\n", line(0)));
        for gpu in one {
            table.put(gpu.uuid.clone(), gpu, later);
        }
        assert_eq!(table.current(later, age).len(), 2, "not stale yet");
        let gone = t0 + Duration::from_secs(6);
        let left: Vec<u32> = table.current(gone, age).iter().map(|g| g.index).collect();
        assert_eq!(left, [0]);
    }

    #[test]
    fn a_table_does_not_grow_past_its_bound() {
        let mut table = Table::new(2);
        let now = Instant::now();
        for key in 0..10 {
            table.put(key, key, now);
        }
        table.put(1, 100, now);
        let mut kept: Vec<i32> = table
            .current(now, Duration::ZERO)
            .into_iter()
            .copied()
            .collect();
        kept.sort();
        assert_eq!(kept, [0, 100]);
    }

    #[test]
    fn a_sample_lists_gpus_by_index_with_their_heaviest_processes() {
        let (gpus, _) = parse_gpus(&format!("{}\n{}\n", line(1), line(0)));
        let apps: Vec<AppReading> = (1..=6)
            .map(|pid| AppReading {
                gpu_uuid: gpus[1].uuid.clone(),
                pid,
                name: format!("p{pid}"),
                memory_used_bytes: Some(u64::from(pid) << 20),
            })
            .collect();
        let listed = gpus_json(
            &gpus.iter().collect::<Vec<_>>(),
            &apps.iter().collect::<Vec<_>>(),
        );
        assert_eq!(listed[0]["index"], 0);
        let pids: Vec<u64> = listed[0]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(pids, [6, 5, 4, 3]);
        assert_eq!(listed[1]["processes"], json!([]));
        assert_eq!(listed[1]["memory_used_bytes"], 1 << 30);
        assert_eq!(listed[1]["power_watts"], 74.5);
    }
}
