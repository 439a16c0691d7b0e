//! The GPUs, from `nvidia-smi` where the machine has one: two long-running processes that print
//! a reading at each interval (`-lms`), one for the GPUs and one, less often, for the processes
//! using them, rather than a process per sample, so that sampling stays cheap. Each is read by a
//! thread of its own into a table; a process that ends is started again after a pause that
//! doubles up to a minute. Lines that do not parse are ignored and counted.

mod parse;
pub(crate) mod program;

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde_json::Value;

use crate::agent::process::{reaper, signal_group};
use parse::{
    gpus_json, parse_app, parse_gpu, AppReading, GpuReading, Line, Table, APPS_QUERY, GPU_QUERY,
};

/// The processes using the GPUs are asked for once every this many GPU readings.
const APPS_EVERY: u32 = 5;
/// The first pause before a process that ended is started again, and the longest.
const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A process that ran this long before it ended is started again after the shortest pause.
const RAN_WELL: Duration = Duration::from_secs(60);
/// The longest line read; a longer one is garbage.
const MAX_LINE: usize = 1024;
/// How long a stop waits for a reader to end (its process killed, its output closed) before it
/// leaves the reader to end on its own: the daemon's shutdown must not hang on a GPU driver.
const STOP_WAIT: Duration = Duration::from_secs(2);
/// GPUs, and processes using them, kept at most (a machine has at most a few dozen GPUs).
const MAX_GPUS: usize = 64;
const MAX_APPS: usize = 1024;

/// What the GPUs showed at the last readings.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct GpuSnapshot {
    /// Each GPU as a sample lists it; `None` until `nvidia-smi` has reported one GPU.
    pub(crate) gpus: Option<Vec<Value>>,
    /// Lines of `nvidia-smi` that did not parse, since the sampler started.
    pub(crate) garbage_lines: u64,
}

pub(crate) struct GpuSource {
    gpus: Feed<String, GpuReading>,
    apps: Feed<(String, u32), AppReading>,
}

impl GpuSource {
    /// Starts both readers of `program` (an `nvidia-smi`) at `interval`.
    pub(crate) fn start(program: PathBuf, interval: Duration) -> Self {
        Self {
            gpus: Feed::start(
                Query {
                    program: program.clone(),
                    kind: "gpu",
                    fields: GPU_QUERY,
                    parse: parse_gpu,
                    key: |gpu| gpu.uuid.clone(),
                    max_entries: MAX_GPUS,
                },
                interval,
            ),
            apps: Feed::start(
                Query {
                    program,
                    kind: "compute-apps",
                    fields: APPS_QUERY,
                    parse: parse_app,
                    key: |app| (app.gpu_uuid.clone(), app.pid),
                    max_entries: MAX_APPS,
                },
                interval * APPS_EVERY,
            ),
        }
    }

    pub(crate) fn set_interval(&self, interval: Duration) {
        self.gpus.set_interval(interval);
        self.apps.set_interval(interval * APPS_EVERY);
    }

    /// The process groups of the running readers: the sampler's, not the workspace's.
    pub(crate) fn helper_pids(&self) -> Vec<i32> {
        [self.gpus.child(), self.apps.child()]
            .into_iter()
            .flatten()
            .collect()
    }

    pub(crate) fn snapshot(&self, now: Instant) -> GpuSnapshot {
        // The one place both locks are held, always in this order.
        let mut apps = self.apps.shared.state.lock();
        let mut gpus = self.gpus.shared.state.lock();
        let ever_read = gpus.ever_read;
        let garbage_lines = gpus.garbage.saturating_add(apps.garbage);
        let (gpu_age, app_age) = (stale_after(gpus.interval), stale_after(apps.interval));
        let current_gpus = gpus.table.current(now, gpu_age);
        let current_apps = apps.table.current(now, app_age);
        GpuSnapshot {
            gpus: ever_read.then(|| gpus_json(&current_gpus, &current_apps)),
            garbage_lines,
        }
    }

    pub(crate) fn stop(&mut self) {
        self.gpus.stop();
        self.apps.stop();
    }
}

impl Drop for GpuSource {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A reading not renewed for two and a half of its intervals (and a second) is gone.
fn stale_after(interval: Duration) -> Duration {
    interval * 5 / 2 + Duration::from_secs(1)
}

/// One `nvidia-smi` query and how its lines become table entries.
struct Query<K, V> {
    program: PathBuf,
    /// `gpu` or `compute-apps`: the option is `--query-KIND=FIELDS`.
    kind: &'static str,
    fields: &'static str,
    parse: fn(&str) -> Line<V>,
    key: fn(&V) -> K,
    max_entries: usize,
}

struct Feed<K, V> {
    shared: Arc<Shared<K, V>>,
    thread: Option<JoinHandle<()>>,
}

struct Shared<K, V> {
    state: Mutex<FeedState<K, V>>,
    wake: Condvar,
}

struct FeedState<K, V> {
    table: Table<K, V>,
    garbage: u64,
    /// Some line has been read as a reading: the machine's tool works.
    ever_read: bool,
    interval: Duration,
    /// The interval changed: end the running process, start one at the new interval.
    restart: bool,
    stop: bool,
    /// The running process (its own group's leader), while it runs.
    child: Option<libc::pid_t>,
    /// The reader has ended (after a stop).
    done: bool,
}

impl<K, V> Feed<K, V>
where
    K: Eq + std::hash::Hash + Send + 'static,
    V: Send + 'static,
{
    fn start(query: Query<K, V>, interval: Duration) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(FeedState {
                table: Table::new(query.max_entries),
                garbage: 0,
                ever_read: false,
                interval,
                restart: false,
                stop: false,
                child: None,
                done: false,
            }),
            wake: Condvar::new(),
        });
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("metrics-{}", query.kind))
            .spawn(move || {
                run(&worker, &query);
                worker.state.lock().done = true;
                worker.wake.notify_all();
            })
            .map_err(|e| tracing::warn!(error = %e, "cannot start a GPU reader"))
            .ok();
        Self { shared, thread }
    }

    fn child(&self) -> Option<i32> {
        self.shared.state.lock().child
    }

    fn set_interval(&self, interval: Duration) {
        let mut state = self.shared.state.lock();
        if state.interval == interval {
            return;
        }
        state.interval = interval;
        state.restart = true;
        end(&state);
        self.shared.wake.notify_all();
    }

    fn stop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        let until = Instant::now() + STOP_WAIT;
        let mut state = self.shared.state.lock();
        state.stop = true;
        end(&state);
        self.shared.wake.notify_all();
        while !state.done {
            if self.shared.wake.wait_until(&mut state, until).timed_out() {
                tracing::warn!("a GPU reader did not end in time; it ends with its process");
                return;
            }
        }
        drop(state);
        let _ = thread.join();
    }
}

/// Ends the running process, if any; its reader then sees the end of its output. The pid is
/// forgotten as soon as the reader learns the process was reaped: signalling another group in
/// the moment between would take the pid space wrapping round in it, and a new process making
/// itself a group leader with that very number.
fn end<K, V>(state: &FeedState<K, V>) {
    if let Some(pgid) = state.child {
        let _ = signal_group(pgid, libc::SIGKILL);
    }
}

/// The reader's life: start the query, read it to its end, start it again (after a pause
/// unless the interval changed), until stopped.
fn run<K: Eq + std::hash::Hash, V>(shared: &Shared<K, V>, query: &Query<K, V>) {
    let mut backoff = MIN_BACKOFF;
    let mut failing = false;
    loop {
        let interval = {
            let mut state = shared.state.lock();
            if state.stop {
                return;
            }
            state.restart = false;
            state.interval
        };
        let started = Instant::now();
        match read_once(shared, query, interval) {
            Ok(()) => failing = false,
            Err(e) => {
                // Said once per run of failures, not at every attempt.
                if !failing {
                    tracing::warn!(error = %e, query = query.kind, "cannot run the GPU query");
                }
                failing = true;
            }
        }
        let mut state = shared.state.lock();
        if state.stop {
            return;
        }
        if state.restart {
            backoff = MIN_BACKOFF;
            continue;
        }
        if started.elapsed() >= RAN_WELL {
            backoff = MIN_BACKOFF;
        }
        let until = Instant::now() + backoff;
        while !state.stop && !state.restart {
            if shared.wake.wait_until(&mut state, until).timed_out() {
                break;
            }
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Runs the query once and reads its lines into the table until its output ends.
fn read_once<K: Eq + std::hash::Hash, V>(
    shared: &Shared<K, V>,
    query: &Query<K, V>,
    interval: Duration,
) -> std::io::Result<()> {
    let millis = interval.as_millis().max(1);
    let mut command = Command::new(&query.program);
    command
        .arg(format!("--query-{}={}", query.kind, query.fields))
        .arg("--format=csv,noheader,nounits")
        .arg("-lms")
        .arg(millis.to_string())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .env_clear()
        // Only what finding its libraries takes, and numbers written with a point.
        .env("LC_ALL", "C");
    for name in ["PATH", "LD_LIBRARY_PATH"] {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    // Its own group, so that ending it ends whatever it started too.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let reaper = reaper()?;
    let (mut child, status) = reaper.spawn(|| command.spawn())?;
    let pid = libc::pid_t::try_from(child.id()).map_err(std::io::Error::other)?;
    let stdout = child.stdout.take();
    {
        let mut state = shared.state.lock();
        state.child = Some(pid);
        if state.stop || state.restart {
            end(&state);
        }
    }
    if let Some(stdout) = stdout {
        read_lines(stdout, |line| {
            let now = Instant::now();
            let parsed = line.map_or(Line::Garbage, query.parse);
            let mut state = shared.state.lock();
            match parsed {
                Line::Reading(value) => {
                    state.table.put((query.key)(&value), value, now);
                    state.ever_read = true;
                }
                Line::Nothing => {}
                Line::Garbage => state.garbage = state.garbage.saturating_add(1),
            }
        });
    }
    // Its output ended: it is ending, or it closed its output and must be ended (unless it
    // has been reaped already).
    let mut status = status;
    if status.try_recv().is_err() {
        let _ = signal_group(pid, libc::SIGKILL);
        let _ = status.blocking_recv();
    }
    shared.state.lock().child = None;
    Ok(())
}

/// Calls `each` with every line of `input` (lossy UTF-8, without its newline), and with `None`
/// for each line longer than [`MAX_LINE`] (skipped to its end). A last line without its newline
/// is not a line: the process ended while writing it.
fn read_lines(input: impl Read, mut each: impl FnMut(Option<&str>)) {
    let mut reader = BufReader::with_capacity(8 * 1024, input);
    let mut line = Vec::with_capacity(MAX_LINE);
    let mut too_long = false;
    loop {
        let (consumed, ended) = match reader.fill_buf() {
            Ok([]) | Err(_) => return,
            Ok(chunk) => match memchr::memchr(b'\n', chunk) {
                Some(i) => {
                    take(&mut line, &mut too_long, &chunk[..i]);
                    (i + 1, true)
                }
                None => {
                    take(&mut line, &mut too_long, chunk);
                    (chunk.len(), false)
                }
            },
        };
        reader.consume(consumed);
        if ended {
            match too_long {
                true => each(None),
                false => each(Some(&String::from_utf8_lossy(&line))),
            }
            line.clear();
            too_long = false;
        }
    }
}

fn take(line: &mut Vec<u8>, too_long: &mut bool, bytes: &[u8]) {
    if *too_long || line.len() + bytes.len() > MAX_LINE {
        *too_long = true;
        return;
    }
    line.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests;
