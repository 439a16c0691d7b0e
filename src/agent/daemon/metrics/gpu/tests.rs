//! The GPU readers against a fake `nvidia-smi`: a shell script that prints, at each `-lms`
//! interval, the lines a test put in a file beside it, and ends when told to.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::*;

const FAKE: &str = r#"#!/bin/sh
# A fake nvidia-smi: prints the file named after its query at each -lms interval.
dir=$(dirname "$0")
case "$1" in --query-gpu=*) f="$dir/gpus" ;; *) f="$dir/apps" ;; esac
echo "$1 $4" >> "$dir/starts"
ms=$4
pause=$((ms / 1000)).$(printf %03d $((ms % 1000)))
while :; do
  [ -e "$dir/die" ] && exit 3
  cat "$f" 2>/dev/null
  sleep "$pause"
done
"#;

fn fake(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mwc-fake-smi-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let program = dir.join("nvidia-smi");
    std::fs::write(&program, FAKE).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    program
}

fn gpu_line(index: u32) -> String {
    format!(
        "{index}, GPU-{index}, NVIDIA Fake, {}, 100, 1000, 40, 50.5\n",
        10 * index
    )
}

fn write(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join(format!("{name}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(tmp, dir.join(name)).unwrap();
}

/// Waits up to 20 s for the snapshot to satisfy `ok`.
fn until(source: &GpuSource, ok: impl Fn(&GpuSnapshot) -> bool) -> GpuSnapshot {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let snapshot = source.snapshot(Instant::now());
        if ok(&snapshot) || Instant::now() > deadline {
            return snapshot;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn indexes(snapshot: &GpuSnapshot) -> Vec<u64> {
    snapshot
        .gpus
        .iter()
        .flatten()
        .map(|g| g["index"].as_u64().unwrap())
        .collect()
}

fn starts(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("starts"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn gpus_show_vanish_and_the_reader_comes_back_after_its_process_dies() {
    let program = fake("life");
    let dir = program.parent().unwrap().to_owned();
    let eight: String = (0..8).map(gpu_line).collect();
    write(&dir, "gpus", &format!("{eight}garbage line\n"));
    write(&dir, "apps", "GPU-3, 77, /usr/bin/python3, 512\n");
    let mut source = GpuSource::start(program, Duration::from_millis(100));

    let got = until(&source, |s| indexes(s).len() == 8 && s.garbage_lines >= 1);
    assert_eq!(indexes(&got), (0..8).collect::<Vec<_>>());
    assert!(got.garbage_lines >= 1, "the garbage line is counted");
    let got = until(&source, |s| {
        s.gpus
            .as_ref()
            .is_some_and(|g| g[3]["processes"].as_array().is_some_and(|p| !p.is_empty()))
    });
    let gpus = got.gpus.unwrap();
    assert_eq!(gpus[3]["processes"][0]["name"], "python3");
    assert_eq!(gpus[3]["processes"][0]["memory_used_bytes"], 512 << 20);
    assert_eq!(gpus[3]["utilization_percent"], 30.0);
    assert_eq!(source.helper_pids().len(), 2, "both readers run");

    // GPU 5 disappears mid-run: it leaves the list once its last reading is stale.
    let seven: String = (0..8).filter(|&i| i != 5).map(gpu_line).collect();
    write(&dir, "gpus", &seven);
    let got = until(&source, |s| indexes(s).len() == 7);
    assert_eq!(indexes(&got), [0, 1, 2, 3, 4, 6, 7]);

    // The process dies: the reader starts it again after a pause.
    let gpu_starts = |dir: &Path| {
        starts(dir)
            .iter()
            .filter(|s| s.starts_with("--query-gpu"))
            .count()
    };
    let before = gpu_starts(&dir);
    write(&dir, "die", "");
    std::thread::sleep(Duration::from_millis(300));
    std::fs::remove_file(dir.join("die")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while gpu_starts(&dir) <= before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(gpu_starts(&dir), before + 1, "{:?}", starts(&dir));
    let got = until(&source, |s| indexes(s).len() == 7);
    assert_eq!(indexes(&got).len(), 7, "read again after the restart");

    // A new interval starts the query again at once, with it.
    source.set_interval(Duration::from_millis(250));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !starts(&dir).iter().any(|s| s.ends_with(" 250")) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(starts(&dir)
        .iter()
        .any(|s| s.starts_with("--query-gpu=index,uuid") && s.ends_with(" 250")));
    assert!(starts(&dir)
        .iter()
        .any(|s| s.starts_with("--query-compute-apps=") && s.ends_with(" 1250")));

    let helpers = source.helper_pids();
    source.stop();
    assert!(source.helper_pids().is_empty());
    // Their groups end (a member killed with them may wait a moment for its reaping).
    let deadline = Instant::now() + Duration::from_secs(10);
    while helpers
        .iter()
        .any(|&pid| signal_group(pid, 0).unwrap_or(false))
    {
        assert!(
            Instant::now() < deadline,
            "the readers' groups {helpers:?} were not ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_tool_that_prints_only_garbage_shows_no_gpus_but_counts_it() {
    let program = fake("garbage");
    let dir = program.parent().unwrap().to_owned();
    write(
        &dir,
        "gpus",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
    );
    let source = GpuSource::start(program, Duration::from_millis(100));
    let got = until(&source, |s| s.garbage_lines >= 3);
    assert_eq!(got.gpus, None, "no GPU was ever read");
    assert!(got.garbage_lines >= 3);
    drop(source);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_long_line_is_one_garbage_line_and_the_next_line_still_reads() {
    let mut seen = Vec::new();
    let input = format!("{}\n0, a\nlast-without-newline", "x".repeat(3 * MAX_LINE));
    read_lines(input.as_bytes(), |line| seen.push(line.map(str::to_owned)));
    assert_eq!(seen, [None, Some("0, a".to_owned())]);
}

#[test]
fn a_missing_program_is_tried_again_without_end_and_stops_when_told() {
    let mut source = GpuSource::start(
        PathBuf::from("/nonexistent/nvidia-smi"),
        Duration::from_millis(100),
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(source.snapshot(Instant::now()), GpuSnapshot::default());
    let started = Instant::now();
    source.stop();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stop interrupts the pause"
    );
}
