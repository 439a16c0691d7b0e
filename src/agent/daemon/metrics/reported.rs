//! What commands report of themselves, teed into the metrics stream: for an exec started with
//! `report_metrics`, each `::metric` line of its stdout or stderr (`policy::metric_line`) that
//! parses becomes a `reported` event `{"exec_id","stream","values","dropped","refused"}` beside
//! the samples.
//!
//! The lines are the workspace's to write, as many as it likes, and the stream's ring is shared
//! with the samples: reported events are held to a byte budget of the whole stream (a token
//! bucket, whoever reports), so that however fast commands print, the ring keeps minutes of
//! samples. Lines past the budget are counted (`dropped`), never queued; lines that say
//! `::metric` and do not parse are counted too (`refused`). The exec's own output keeps every
//! line: the metrics stream is a live view, the exec's log the record.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::agent::process::Stream;
use crate::event::EventType;
use crate::policy::{MetricLine, MetricLineReader};
use crate::ring::EventRing;

/// The share of the ring reported events may fill each second, on average: 1/512 of it
/// (2 KiB a second of the default 1 MiB, about a dozen events). With the samples' half
/// kilobyte a second, the ring then always spans minutes of samples.
const RATE_DIVISOR: usize = 512;
/// The burst reported events may take at once: 1/16 of the ring (64 KiB of the default, a few
/// hundred events), so that a command that reports a handful of values now and then is never
/// thinned.
const BURST_DIVISOR: usize = 16;

/// How many of an exec's metric lines went where: into the stream (`events`), nowhere for the
/// budget or a closed stream (`dropped`), or nowhere for not parsing (`refused`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReportedCounts {
    pub(crate) events: u64,
    pub(crate) dropped: u64,
    pub(crate) refused: u64,
}

/// [`ReportedCounts`] as an exec's output is read (the exec's status shows them live).
#[derive(Debug, Default)]
pub(crate) struct ReportCounters {
    events: AtomicU64,
    dropped: AtomicU64,
    refused: AtomicU64,
}

impl ReportCounters {
    pub(crate) fn counts(&self) -> ReportedCounts {
        ReportedCounts {
            events: self.events.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }
}

/// The metrics stream's side of reported metrics: its ring and the budget every exec that
/// reports shares.
pub(crate) struct ReportedMetrics {
    ring: Arc<EventRing>,
    budget: Mutex<Budget>,
}

impl ReportedMetrics {
    pub(crate) fn new(ring: Arc<EventRing>) -> Self {
        let ring_bytes = ring.max_bytes();
        Self {
            ring,
            budget: Mutex::new(Budget::new(
                ring_bytes / RATE_DIVISOR,
                ring_bytes / BURST_DIVISOR,
                Instant::now(),
            )),
        }
    }

    /// The reader of one exec's output.
    pub(crate) fn for_exec(self: &Arc<Self>, exec_id: &str) -> ExecReports {
        ExecReports {
            stream: Arc::clone(self),
            exec_id: exec_id.to_owned(),
            stdout: Mutex::new(MetricLineReader::new()),
            stderr: Mutex::new(MetricLineReader::new()),
            counters: Arc::default(),
        }
    }

    /// Appends one reported event with the `fields` made by `event`, unless the budget is spent
    /// (then nothing is made); whether it did.
    fn append(&self, event: impl FnOnce() -> Map<String, Value>, now: Instant) -> bool {
        // Held across the append (a few microseconds), so that the budget is exact.
        let mut budget = self.budget.lock();
        if !budget.allows(now) {
            return false;
        }
        let mut bytes = 0;
        let appended = self
            .ring
            .append_with(EventType::Reported, None, &event(), &mut |events| {
                bytes = events.iter().map(|e| e.encoded_len()).sum();
            });
        match appended {
            Ok(_) => {
                budget.spend(bytes);
                true
            }
            Err(e) => {
                // The stream closed with the daemon, or fields too large (a bound of the
                // parser keeps them small): the line is dropped, never the exec's output.
                tracing::debug!(error = %e.message(), "a reported metric was not recorded");
                false
            }
        }
    }
}

/// One exec's output read for metric lines: stdout and stderr each with its own line reader
/// (never a line joined across the two), and what became of its lines.
pub(crate) struct ExecReports {
    stream: Arc<ReportedMetrics>,
    exec_id: String,
    stdout: Mutex<MetricLineReader>,
    stderr: Mutex<MetricLineReader>,
    counters: Arc<ReportCounters>,
}

impl ExecReports {
    pub(crate) fn counters(&self) -> Arc<ReportCounters> {
        Arc::clone(&self.counters)
    }

    /// Reads the next bytes of the exec's `stream` (as its log stores them).
    pub(crate) fn scan(&self, stream: Stream, data: &[u8]) {
        self.reader(stream)
            .lock()
            .feed(data, &mut |line| self.report(stream, line));
    }

    /// The exec's output ended: a last line without its newline counts too.
    pub(crate) fn finish(&self) {
        for stream in [Stream::Stdout, Stream::Stderr] {
            self.reader(stream)
                .lock()
                .finish(&mut |line| self.report(stream, line));
        }
    }

    fn reader(&self, stream: Stream) -> &Mutex<MetricLineReader> {
        match stream {
            Stream::Stdout => &self.stdout,
            Stream::Stderr => &self.stderr,
        }
    }

    fn report(&self, stream: Stream, line: MetricLine) {
        let values = match line {
            MetricLine::Values(values) => values,
            MetricLine::Refused => {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
            MetricLine::Other => return,
        };
        let event = || {
            let counts = self.counters.counts();
            let values: Map<String, Value> = values
                .into_iter()
                .map(|(name, value)| (name, json!(value)))
                .collect();
            let mut fields = Map::new();
            fields.insert("exec_id".into(), json!(self.exec_id));
            let name = match stream {
                Stream::Stdout => "stdout",
                Stream::Stderr => "stderr",
            };
            fields.insert("stream".into(), json!(name));
            fields.insert("values".into(), Value::Object(values));
            fields.insert("dropped".into(), json!(counts.dropped));
            fields.insert("refused".into(), json!(counts.refused));
            fields
        };
        let counter = match self.stream.append(event, Instant::now()) {
            true => &self.counters.events,
            false => &self.counters.dropped,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A token bucket of bytes: `rate` a second, at most `burst` held. An event is let through
/// while the bucket is not empty and its size is taken after (the bucket may go below zero by
/// one event), so that no event is ever too large to pass.
#[derive(Debug)]
struct Budget {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Budget {
    fn new(rate: usize, burst: usize, now: Instant) -> Self {
        let burst = burst.max(1) as f64;
        Self {
            rate: rate.max(1) as f64,
            burst,
            tokens: burst,
            at: now,
        }
    }

    fn allows(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at);
        self.at = self.at.max(now);
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.rate).min(self.burst);
        self.tokens > 0.0
    }

    fn spend(&mut self, bytes: usize) {
        self.tokens -= bytes as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::StreamKind;
    use std::time::Duration;

    fn stream(ring_bytes: usize) -> Arc<ReportedMetrics> {
        let ring = EventRing::of_kind(Some(StreamKind::Metrics), ring_bytes, None).unwrap();
        Arc::new(ReportedMetrics::new(Arc::new(ring)))
    }

    fn events(ring: &EventRing) -> Vec<Value> {
        let page = ring.read(0, 100_000, 64 << 20, false).unwrap();
        serde_json::from_str::<Value>(&page.events_json())
            .unwrap()
            .as_array()
            .cloned()
            .unwrap()
    }

    #[test]
    fn each_metric_line_becomes_an_event_with_the_exec_and_its_values_in_order() {
        let stream = stream(1 << 20);
        let exec = stream.for_exec("ex-0123456789abcdef0123456789abcdef");
        exec.scan(
            Stream::Stdout,
            b"noise\n::metric loss=0.9 step=1\n::metric lo",
        );
        exec.scan(Stream::Stderr, b"::metric {\"acc\": 0.5}\n::metric lo");
        exec.scan(
            Stream::Stdout,
            b"ss=0.7 step=2\n::metric loss=x\n::metric loss=0.2",
        );
        exec.finish();
        let events = events(&stream.ring);
        let shown: Vec<(String, Value)> = events
            .iter()
            .map(|e| {
                (
                    e["stream"].as_str().unwrap().to_owned(),
                    e["values"].clone(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("stdout".into(), json!({"loss": 0.9, "step": 1.0})),
                ("stderr".into(), json!({"acc": 0.5})),
                ("stdout".into(), json!({"loss": 0.7, "step": 2.0})),
                ("stdout".into(), json!({"loss": 0.2})),
            ]
        );
        for event in &events {
            assert_eq!(event["type"], "reported");
            assert_eq!(event["exec_id"], "ex-0123456789abcdef0123456789abcdef");
            assert_eq!(event["dropped"], 0);
        }
        // The refused line (`loss=x`) came before the last event, which says so; the stderr
        // line that ended without its newline (`::metric lo`) is refused at the end.
        assert_eq!(events[3]["refused"], 1);
        let counts = exec.counters().counts();
        assert_eq!(
            counts,
            ReportedCounts {
                events: 4,
                dropped: 0,
                refused: 2
            }
        );
    }

    #[test]
    fn a_flood_of_lines_is_held_to_the_budget_and_counted() {
        let ring_bytes = 1 << 20;
        let stream = stream(ring_bytes);
        let exec = stream.for_exec("ex-0123456789abcdef0123456789abcdef");
        let lines = 100_000;
        let mut text = Vec::new();
        for i in 0..lines {
            text.extend_from_slice(format!("::metric loss={i} step={i}\n").as_bytes());
        }
        let started = Instant::now();
        for chunk in text.chunks(64 * 1024) {
            exec.scan(Stream::Stdout, chunk);
        }
        let took = started.elapsed();
        let counts = exec.counters().counts();
        assert_eq!(counts.events + counts.dropped, lines);
        let kept = events(&stream.ring);
        assert_eq!(kept.len() as u64, counts.events);
        let held = stream.ring.held_bytes();
        // The burst and what the time it took added, and one event past them.
        let allowed = ring_bytes / BURST_DIVISOR
            + (took.as_secs_f64() * (ring_bytes / RATE_DIVISOR) as f64) as usize
            + 512;
        assert!(held <= allowed, "{held} bytes held, {allowed} allowed");
        assert!(counts.dropped > lines / 2, "{counts:?}");
        // Each event says how many were dropped before it, so a reader sees the gaps.
        let last = kept.last().unwrap();
        assert!(last["dropped"].as_u64().unwrap() <= counts.dropped);
        assert_eq!(kept[0]["values"]["step"], 0.0);
    }

    #[test]
    fn the_budget_refills_at_its_rate_up_to_its_burst() {
        let start = Instant::now();
        let mut budget = Budget::new(1000, 4000, start);
        assert!(budget.allows(start));
        budget.spend(5000);
        assert!(!budget.allows(start));
        // 1000 bytes short: a second and a little more.
        assert!(!budget.allows(start + Duration::from_millis(999)));
        let later = start + Duration::from_millis(1100);
        assert!(budget.allows(later));
        // Never more than the burst, however long it rested.
        assert!(budget.allows(later + Duration::from_secs(3600)));
        budget.spend(4000);
        assert!(!budget.allows(later + Duration::from_secs(3600)));
        // A clock read out of order takes nothing back.
        assert!(!budget.allows(start));
    }

    #[test]
    fn a_closed_stream_drops_the_lines_and_the_exec_goes_on() {
        let stream = stream(1 << 20);
        stream.ring.close();
        let exec = stream.for_exec("ex-0123456789abcdef0123456789abcdef");
        exec.scan(Stream::Stdout, b"::metric a=1\n");
        assert_eq!(exec.counters().counts().dropped, 1);
    }
}
