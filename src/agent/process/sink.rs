//! Where output goes: the caller's sink, awaited by the readers so a slow sink slows the process
//! down through its pipe instead of growing the supervisor's memory.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::status::ExecStatus;

/// The largest chunk handed to a sink in one call.
pub const MAX_CHUNK: usize = 64 * 1024;

/// Which output stream a chunk came from. A PTY has one stream, reported as `Stdout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    Stdout,
    Stderr,
}

pub type SinkFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What a step with a report channel wrote there (see `ExecSpec::report`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepReport {
    /// Its first `MAX_REPORT_BYTES`.
    pub data: Vec<u8>,
    /// How many bytes it wrote in all.
    pub total: u64,
}

impl StepReport {
    /// It wrote more than was kept.
    pub fn truncated(&self) -> bool {
        self.total > self.data.len() as u64
    }
}

/// Receives an exec's output.
///
/// Flow-control contract: each stream has one reader that reads at most [`MAX_CHUNK`] bytes,
/// awaits `output`, and only then reads again. The supervisor therefore holds at most one chunk
/// per stream; a sink that is slow (or waits for room downstream) leaves the data in the kernel
/// pipe, whose fill blocks the process's writes. Calls for one stream are in order and never
/// overlap; stdout and stderr calls may run concurrently. `finished` is called exactly once,
/// after every `output` call of the exec has returned, and before `Exec::wait` resolves.
/// `report` is called once for each step that has a report channel, after that step's output
/// and before the next step starts (or `finished`).
pub trait OutputSink: Send + Sync + 'static {
    fn output<'a>(&'a self, stream: Stream, chunk: &'a [u8]) -> SinkFuture<'a>;

    fn report(&self, _report: StepReport) -> SinkFuture<'_> {
        Box::pin(async {})
    }

    fn finished<'a>(&'a self, _status: &'a ExecStatus) -> SinkFuture<'a> {
        Box::pin(async {})
    }
}

/// What a [`ChannelSink`] forwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkEvent {
    Output { stream: Stream, data: Vec<u8> },
    Finished(ExecStatus),
}

/// A sink that forwards into a bounded channel: a full channel back-pressures the process.
/// When the receiver is dropped, further output is discarded and the process runs on.
pub struct ChannelSink {
    tx: mpsc::Sender<SinkEvent>,
}

impl ChannelSink {
    pub fn new(capacity: usize) -> (Arc<Self>, mpsc::Receiver<SinkEvent>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (Arc::new(Self { tx }), rx)
    }
}

impl OutputSink for ChannelSink {
    fn output<'a>(&'a self, stream: Stream, chunk: &'a [u8]) -> SinkFuture<'a> {
        Box::pin(async move {
            let event = SinkEvent::Output {
                stream,
                data: chunk.to_vec(),
            };
            // A dropped receiver means nobody wants the output any more; the exec still runs.
            let _ = self.tx.send(event).await;
        })
    }

    fn finished<'a>(&'a self, status: &'a ExecStatus) -> SinkFuture<'a> {
        Box::pin(async move {
            let _ = self.tx.send(SinkEvent::Finished(status.clone())).await;
        })
    }
}
