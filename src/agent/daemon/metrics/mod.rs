//! The workspace's metrics stream: one per daemon (`mt-…`), a sample every interval (2 s unless
//! set, 0.5–60 s) as a `metrics` event in a ring of bounded size, read like any other stream.
//!
//! It starts with the daemon, not on the first request: a reader asks what the workspace has
//! been doing, and a stream started by the question would have nothing to answer it with; and
//! a sample costs far less than a percent of a core. Sampling runs on a thread of its own,
//! since it reads files; the ring wakes the readers.
//!
//! Sources, one module each: `processes` and `cpu` (the processes that descend from the
//! daemon: CPU, top processes, RSS), `memory` (cgroup or `/proc/meminfo`), `disk` (the root's
//! file system), `network` (`/proc/net/dev`), `gpu` (`nvidia-smi`, where there is one).
//!
//! Beside the samples, the stream carries what commands report of themselves (`reported`:
//! `reported` events, for the execs started with `report_metrics`, held to a budget).

mod bounded;
mod cpu;
mod disk;
mod gpu;
mod memory;
mod network;
mod processes;
mod reported;
mod sample;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde_json::{json, Value};

use crate::agent::ops::internal;
use crate::channel::message::{ErrorBody, ErrorCode};
use crate::event::{Event, EventType, StreamKind};
use crate::policy;
use crate::ring::EventRing;
pub(crate) use reported::{ExecReports, ReportCounters, ReportedCounts, ReportedMetrics};

/// Encoded bytes of samples kept (a sample is under a kilobyte without GPUs: about half an
/// hour at the default interval). A reader further behind is told exactly what it lost.
pub const DEFAULT_RING_BYTES: usize = 1 << 20;

/// How the daemon samples: at which interval (`None`: not until `metrics.set` asks), into a
/// ring of how many bytes.
#[derive(Debug, Clone)]
pub struct MetricsConfig {
    pub interval: Option<Duration>,
    pub ring_bytes: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            interval: Some(crate::agent::ops::DEFAULT_METRICS_INTERVAL),
            ring_bytes: DEFAULT_RING_BYTES,
        }
    }
}

pub(crate) struct MetricsStream {
    pub(crate) ring: Arc<EventRing>,
    /// The latest sample, kept apart from the ring: the ring's newest event may be a reported
    /// one, and the sample it followed may have left the ring.
    latest: Arc<Mutex<Option<Event>>>,
    /// Where the execs that report metrics put them (see `reported`).
    reported: Arc<ReportedMetrics>,
    id: String,
    root: PathBuf,
    /// The daemon's `PATH`, where `nvidia-smi` is looked for.
    path_var: Option<OsString>,
    control: Arc<Control>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Control {
    state: Mutex<ControlState>,
    wake: Condvar,
}

struct ControlState {
    interval: Option<Duration>,
    stop: bool,
}

impl MetricsStream {
    /// The stream of the workspace at `root`, sampling at once when `config` has an interval.
    pub(crate) fn open(root: PathBuf, config: &MetricsConfig) -> Result<Self, String> {
        let ring = EventRing::of_kind(Some(StreamKind::Metrics), config.ring_bytes.max(1), None)
            .map_err(|e| format!("cannot make the metrics ring: {}", e.message()))?;
        let ring = Arc::new(ring);
        let stream = Self {
            reported: Arc::new(ReportedMetrics::new(Arc::clone(&ring))),
            latest: Arc::default(),
            ring,
            id: policy::new_id("mt").map_err(|e| e.message)?,
            root,
            path_var: std::env::var_os("PATH"),
            control: Arc::new(Control {
                state: Mutex::new(ControlState {
                    interval: config.interval,
                    stop: false,
                }),
                wake: Condvar::new(),
            }),
            thread: Mutex::new(None),
        };
        if config.interval.is_some() {
            stream.start()?;
        }
        Ok(stream)
    }

    /// The ring of the stream `id` names: this daemon's, or `not_found` (an earlier daemon's
    /// stream ended with it).
    pub(crate) fn entry(&self, id: &str) -> Result<Arc<EventRing>, ErrorBody> {
        let id = policy::check_id("mt", id).map_err(|e| ErrorBody::invalid("stream", e.message))?;
        if id != self.id {
            return Err(ErrorBody::new(
                ErrorCode::NotFound,
                format!(
                    "no metrics stream '{id}': this agent's is {} (a restarted agent starts a new \
                     one; ask metrics.status for it)",
                    self.id
                ),
            ));
        }
        Ok(Arc::clone(&self.ring))
    }

    /// Where the execs that report metrics put them.
    pub(crate) fn reported(&self) -> Arc<ReportedMetrics> {
        Arc::clone(&self.reported)
    }

    /// The stream's id, state, interval, newest seq (a sample's or a reported event's) and its
    /// latest sample (null before the first).
    pub(crate) fn status(&self) -> Value {
        let interval = self.control.state.lock().interval;
        let last_seq = self.ring.last_seq();
        let sample = self
            .latest
            .lock()
            .as_ref()
            .and_then(|event| serde_json::from_str::<Value>(event.json()).ok())
            .unwrap_or(Value::Null);
        let state = self
            .ring
            .status()
            .state
            .unwrap_or(StreamKind::Metrics.initial_state());
        json!({
            "stream_id": self.id,
            "state": state.as_str(),
            "interval_seconds": interval.map(|i| i.as_secs_f64()),
            "last_seq": last_seq,
            "sample": sample,
        })
    }

    /// Samples at `interval` from the next sample on (starting the sampler if it was off).
    pub(crate) fn set_interval(&self, interval: Duration) -> Result<Value, ErrorBody> {
        {
            let mut state = self.control.state.lock();
            state.interval = Some(interval);
            self.control.wake.notify_all();
        }
        if self.thread.lock().is_none() {
            self.start()
                .map_err(|e| internal("cannot start the sampler", e))?;
        }
        Ok(self.status())
    }

    fn start(&self) -> Result<(), String> {
        let mut thread = self.thread.lock();
        if thread.is_some() {
            return Ok(());
        }
        let control = Arc::clone(&self.control);
        let ring = Arc::clone(&self.ring);
        let latest = Arc::clone(&self.latest);
        let root = self.root.clone();
        let path_var = self.path_var.clone();
        let handle = std::thread::Builder::new()
            .name("metrics-sampler".into())
            .spawn(move || {
                sample_until_stopped(&control, (&ring, &latest), &root, path_var.as_deref())
            })
            .map_err(|e| format!("cannot start the metrics sampler: {e}"))?;
        *thread = Some(handle);
        Ok(())
    }

    /// Stops sampling (the `nvidia-smi` readers with it) and closes the stream.
    pub(crate) fn stop(&self) {
        {
            let mut state = self.control.state.lock();
            state.stop = true;
            self.control.wake.notify_all();
        }
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
        self.ring.close();
    }
}

impl Drop for MetricsStream {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The sampler's thread: a sample each interval (a new interval counts from the last sample),
/// into the ring and as the latest, until stopped.
fn sample_until_stopped(
    control: &Control,
    (ring, latest): (&EventRing, &Mutex<Option<Event>>),
    root: &std::path::Path,
    path_var: Option<&std::ffi::OsStr>,
) {
    let Some(first) = control.state.lock().interval else {
        return;
    };
    let mut sources = sample::Sources::open(root, path_var, first);
    let mut in_use = first;
    let mut last = Instant::now();
    loop {
        let interval = {
            let mut state = control.state.lock();
            loop {
                if state.stop {
                    return;
                }
                let interval = state.interval.unwrap_or(in_use);
                let due = last + interval;
                if Instant::now() >= due {
                    break interval;
                }
                control.wake.wait_until(&mut state, due);
            }
        };
        if interval != in_use {
            sources.set_interval(interval);
            in_use = interval;
        }
        last = Instant::now();
        let fields = sources.sample(interval);
        // Kept as the latest before readers of the ring can see it: a reader woken by the
        // sample finds it in the status too.
        let appended = ring.append_with(EventType::Metrics, None, &fields, &mut |events| {
            if let Some(sample) = events.last() {
                *latest.lock() = Some(sample.clone());
            }
        });
        if let Err(e) = appended {
            tracing::warn!(error = %e.message(), "a metrics sample was not recorded");
        }
    }
}

#[cfg(test)]
mod tests;
