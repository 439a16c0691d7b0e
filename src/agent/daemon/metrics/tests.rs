//! The metrics stream in this process (the test binary plays the daemon): samples at the
//! interval, the latest in the status, a new interval, a reader far behind told what it lost.

use std::process::{Command, Stdio};

use super::*;

fn config(interval_ms: u64, ring_bytes: usize) -> MetricsConfig {
    MetricsConfig {
        interval: Some(Duration::from_millis(interval_ms)),
        ring_bytes,
    }
}

fn wait_for_seq(stream: &MetricsStream, seq: u64) {
    assert!(
        stream.ring.wait(seq - 1, Duration::from_secs(20)),
        "no sample {seq} in time"
    );
}

fn samples(ring: &EventRing, cursor: u64) -> (crate::ring::Page, Vec<Value>) {
    let page = ring.read(cursor, 1000, 1 << 20, false).unwrap();
    let events: Value = serde_json::from_str(&page.events_json()).unwrap();
    let events = events.as_array().cloned().unwrap_or_default();
    (page, events)
}

#[test]
fn the_stream_samples_at_its_interval_and_its_status_has_the_latest() {
    let stream = MetricsStream::open(std::env::temp_dir(), &config(500, 1 << 20)).unwrap();
    let before = stream.status();
    let id = before["stream_id"].as_str().unwrap();
    assert!(id.starts_with("mt-"));
    assert_eq!(StreamKind::of(id).unwrap(), StreamKind::Metrics);
    assert_eq!(before["state"], "running");
    assert_eq!(before["interval_seconds"], 0.5);
    wait_for_seq(&stream, 2);
    let status = stream.status();
    let sample = &status["sample"];
    assert_eq!(sample["type"], "metrics");
    assert_eq!(sample["seq"], status["last_seq"]);
    assert!(sample["timestamp"].as_str().unwrap().ends_with('Z'));
    assert!(sample["cpu"]["percent"].is_number(), "{sample}");
    let (page, events) = samples(&stream.ring, 0);
    assert_eq!(page.status.state, Some(crate::event::StreamState::Running));
    assert!(events.iter().all(|e| e["type"] == "metrics"));
}

#[test]
fn a_new_interval_is_taken_and_a_stopped_stream_is_done() {
    let stream = MetricsStream::open(std::env::temp_dir(), &config(60_000, 1 << 20)).unwrap();
    let started = Instant::now();
    let status = stream.set_interval(Duration::from_millis(500)).unwrap();
    assert_eq!(status["interval_seconds"], 0.5);
    wait_for_seq(&stream, 1);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the minute's wait was cut short"
    );
    stream.stop();
    let (page, _) = samples(&stream.ring, 0);
    assert!(page.done(), "a stopped stream is closed");
}

#[test]
fn a_stream_without_an_interval_waits_for_one() {
    let off = MetricsConfig {
        interval: None,
        ring_bytes: 1 << 20,
    };
    let stream = MetricsStream::open(std::env::temp_dir(), &off).unwrap();
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(stream.ring.last_seq(), 0);
    assert_eq!(stream.status()["interval_seconds"], Value::Null);
    assert_eq!(stream.status()["sample"], Value::Null);
    stream.set_interval(Duration::from_millis(500)).unwrap();
    wait_for_seq(&stream, 1);
}

#[test]
fn a_reader_behind_a_small_ring_is_told_exactly_what_it_lost() {
    let stream = MetricsStream::open(std::env::temp_dir(), &config(500, 2048)).unwrap();
    wait_for_seq(&stream, 6);
    let (page, events) = samples(&stream.ring, 0);
    assert!(page.cursor_expired);
    assert!(page.first_seq > 1);
    assert_eq!(page.dropped_events, page.first_seq - 1);
    assert_eq!(events[0]["seq"], page.first_seq);
}

#[test]
fn only_this_daemons_stream_is_found() {
    let stream = MetricsStream::open(std::env::temp_dir(), &config(60_000, 1 << 20)).unwrap();
    assert!(stream.entry(&stream.id).is_ok());
    let other = policy::new_id("mt").unwrap();
    assert_eq!(stream.entry(&other).unwrap_err().code, ErrorCode::NotFound);
    let bad = stream.entry("mt-nope").unwrap_err();
    assert_eq!(bad.code, ErrorCode::InvalidArgument);
}

#[test]
fn a_child_that_burns_a_core_shows_within_two_intervals() {
    let stream = MetricsStream::open(std::env::temp_dir(), &config(500, 1 << 20)).unwrap();
    let mut burner = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = i64::from(burner.id());
    let from = stream.ring.last_seq();
    wait_for_seq(&stream, from + 2);
    let (_, events) = samples(&stream.ring, from);
    let _ = burner.kill();
    let _ = burner.wait();
    let second = &events[1];
    let top = second["cpu"]["top"].as_array().unwrap();
    let burning = top.iter().find(|p| p["pid"].as_i64() == Some(pid));
    let burning = burning.unwrap_or_else(|| panic!("{pid} not in the top: {second}"));
    assert_eq!(burning["name"], "sh");
    // A core, on a machine that other work shares.
    assert!(burning["cpu_percent"].as_f64().unwrap() > 20.0, "{second}");
    assert!(
        second["cpu"]["percent"].as_f64().unwrap() > 20.0,
        "{second}"
    );
    assert!(second["processes"].as_u64().unwrap() >= 1);
}

#[test]
fn the_status_answers_the_latest_sample_when_reported_events_came_after_it() {
    let stream = MetricsStream::open(std::env::temp_dir(), &config(60_000, 1 << 20)).unwrap();
    stream.set_interval(Duration::from_millis(500)).unwrap();
    wait_for_seq(&stream, 1);
    stream.set_interval(Duration::from_secs(60)).unwrap();
    let exec = stream
        .reported()
        .for_exec("ex-0123456789abcdef0123456789abcdef");
    exec.scan(crate::agent::process::Stream::Stdout, b"::metric loss=1\n");
    let status = stream.status();
    let sample = &status["sample"];
    assert_eq!(sample["type"], "metrics", "{status}");
    assert!(sample["cpu"].is_object());
    assert!(
        status["last_seq"].as_u64() > sample["seq"].as_u64(),
        "{status}"
    );
    let (_, events) = samples(&stream.ring, 0);
    let reported = events.iter().find(|e| e["type"] == "reported").unwrap();
    assert_eq!(reported["values"]["loss"], 1.0);
}

#[test]
fn the_latest_sample_is_answered_after_the_ring_lost_it() {
    // A ring of about two samples; one sample, then no other for a minute.
    let stream = MetricsStream::open(std::env::temp_dir(), &config(60_000, 2048)).unwrap();
    stream.set_interval(Duration::from_millis(500)).unwrap();
    wait_for_seq(&stream, 1);
    stream.set_interval(Duration::from_secs(60)).unwrap();
    let seq = stream.status()["sample"]["seq"].as_u64().unwrap();
    let mut fields = serde_json::Map::new();
    fields.insert("values".into(), json!({"x": "y".repeat(200)}));
    for _ in 0..20 {
        stream
            .ring
            .append(EventType::Reported, None, &fields)
            .unwrap();
    }
    let (page, _) = samples(&stream.ring, 0);
    assert!(page.first_seq > seq, "the sample left the ring");
    let status = stream.status();
    assert_eq!(status["sample"]["seq"], seq, "{status}");
    assert_eq!(status["sample"]["type"], "metrics");
}
