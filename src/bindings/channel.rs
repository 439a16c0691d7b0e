//! Python bindings for the gateway's side of the agent channel: `AgentChannel` (sans-IO, fed
//! bytes from any transport) and `parse_page` for pages that come back as response payloads.

use parking_lot::Mutex;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict};

use super::errors::{channel_error, page_error, policy_error, ring_error};
use super::ring::PyPage;
use crate::channel::client::{
    read_ring, AgentChannel, CacheConfig, CacheRead, Fed, ReceivedPage, KEEPALIVE_SECONDS,
};

/// Feeds larger than this are handled with the GIL released (pages are parsed and mirrored).
const DETACH_FEED_BYTES: usize = 16 * 1024;

/// One response as Python sees it: `(id, ok, body_json, payload)`.
type PyResponse = (u64, bool, String, Py<PyBytes>);

/// The gateway's end of one agent channel; safe to share between threads (one lock inside).
#[pyclass(frozen, name = "AgentChannel", module = "modal_workspace_core._core")]
pub struct PyAgentChannel {
    inner: Mutex<AgentChannel>,
    /// Where data fed from a reused buffer (a `memoryview`) is copied, reused in turn, so that
    /// a transport that reads into one buffer causes no allocation per read here either.
    scratch: Mutex<Vec<u8>>,
}

impl PyAgentChannel {
    fn feed_bytes(&self, py: Python<'_>, data: &[u8]) -> Fed {
        if data.len() > DETACH_FEED_BYTES {
            py.detach(|| self.inner.lock().feed(data))
        } else {
            self.inner.lock().feed(data)
        }
    }
}

#[pymethods]
impl PyAgentChannel {
    #[new]
    // The default is `KEEPALIVE_SECONDS` spelt as a literal, so that the signature shows it
    // (a test holds the two equal).
    #[pyo3(signature = (
        *, stream_bytes=1_048_576, max_streams=64, credit=1_048_576, key=None,
        keepalive_seconds=10
    ))]
    fn new(
        stream_bytes: usize,
        max_streams: usize,
        credit: usize,
        key: Option<String>,
        keepalive_seconds: u32,
    ) -> PyResult<Self> {
        let config = CacheConfig {
            stream_bytes,
            max_streams,
            credit,
        };
        let channel =
            AgentChannel::configured(config, key, keepalive_seconds).map_err(policy_error)?;
        Ok(Self {
            inner: Mutex::new(channel),
            scratch: Mutex::new(Vec::new()),
        })
    }

    /// Handles bytes read from the transport (`bytes`, or any buffer of bytes, such as a view
    /// of a buffer the transport reuses: it is copied before the call returns). Returns
    /// `(hello, responses, woken)`; a failure of the channel comes as a response with id 0 and
    /// `ok` false.
    fn feed(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
    ) -> PyResult<(Option<String>, Vec<PyResponse>, Vec<String>)> {
        let fed = match data.cast::<PyBytes>() {
            Ok(bytes) => self.feed_bytes(py, bytes.as_bytes()),
            Err(_) => {
                let buffer = PyBuffer::<u8>::get(data)?;
                // Taken out rather than locked across the feed, which may release the GIL:
                // holding a lock while taking the GIL back could deadlock with a thread that
                // holds the GIL and waits for the lock.
                let mut scratch = std::mem::take(&mut *self.scratch.lock());
                scratch.resize(buffer.item_count(), 0);
                buffer.copy_to_slice(py, &mut scratch)?;
                let fed = self.feed_bytes(py, &scratch);
                *self.scratch.lock() = scratch;
                fed
            }
        };
        let mut responses: Vec<PyResponse> = fed
            .responses
            .into_iter()
            .map(|r| (r.id, r.ok, r.body, PyBytes::new(py, &r.payload).unbind()))
            .collect();
        if let Some(failure) = fed.failure {
            responses.push((0, false, failure.to_json(), PyBytes::new(py, b"").unbind()));
        }
        Ok((fed.hello, responses, fed.woken))
    }

    /// The bytes to write to the transport now (possibly empty).
    /// Queues a keepalive frame if the agent takes them (True when one was queued): call it
    /// every `keepalive_seconds`, then send `take_outgoing()`.
    fn keepalive(&self) -> bool {
        self.inner.lock().keepalive()
    }

    /// How often this channel promised the agent a frame.
    #[getter]
    fn keepalive_seconds(&self) -> u32 {
        self.inner.lock().keepalive_seconds()
    }

    fn take_outgoing<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let bytes = self.inner.lock().take_outgoing();
        PyBytes::new(py, &bytes)
    }

    // The signature pyo3 would render shows `payload=...`: a byte-string default is not a
    // literal it can print, so the stub's truth is spelt out.
    #[pyo3(
        signature = (op, args=None, payload=b"".as_slice()),
        text_signature = "($self, op, args=None, payload=b'')"
    )]
    fn request(
        &self,
        py: Python<'_>,
        op: &str,
        args: Option<&Bound<'_, PyDict>>,
        payload: &[u8],
    ) -> PyResult<u64> {
        let args_json = match args {
            Some(dict) => dumps(py, dict)?,
            None => "{}".to_owned(),
        };
        self.inner
            .lock()
            .request(op, &args_json, payload.to_vec())
            .map_err(channel_error)
    }

    fn cancel(&self, id: u64) {
        self.inner.lock().cancel(id);
    }

    fn subscribe(&self, stream: &str, cursor: i64) -> PyResult<(Option<u64>, Vec<String>)> {
        let cursor = to_cursor(cursor)?;
        match self
            .inner
            .lock()
            .subscribe(stream, cursor)
            .map_err(channel_error)?
        {
            Some(sub) => Ok((Some(sub.id), sub.dropped)),
            None => Ok((None, Vec::new())),
        }
    }

    fn pin(&self, stream: &str) {
        self.inner.lock().pin(stream);
    }

    fn unpin(&self, stream: &str) {
        self.inner.lock().unpin(stream);
    }

    #[pyo3(signature = (stream, cursor, max_events=100, max_bytes=65_536))]
    fn read_cached(
        &self,
        stream: &str,
        cursor: i64,
        max_events: i64,
        max_bytes: i64,
    ) -> PyResult<(&'static str, Option<PyPage>)> {
        let cursor = to_cursor(cursor)?;
        let max_events = usize::try_from(max_events)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| PyValueError::new_err("max_events must be at least 1"))?;
        let max_bytes = usize::try_from(max_bytes).unwrap_or(0);
        // The channel's lock is held only to find the ring (and count the reader's progress
        // toward credit); the read runs under the ring's own.
        let ring = {
            let mut channel = self.inner.lock();
            let Some(ring) = channel.ring(stream) else {
                return Ok(("missing", None));
            };
            channel.reader_at(stream, cursor);
            ring
        };
        let read = read_ring(&ring, cursor, max_events, max_bytes).map_err(ring_error)?;
        Ok(match read {
            CacheRead::Missing => ("missing", None),
            CacheRead::Page(page) => ("page", Some(PyPage::from_page(page))),
            CacheRead::Expired(page) => ("expired", Some(PyPage::from_page(page))),
            CacheRead::Ahead { closed: false } => ("ahead", None),
            CacheRead::Ahead { closed: true } => ("ahead_closed", None),
        })
    }

    fn restart(&self) {
        self.inner.lock().restart();
    }

    #[getter]
    fn agent_hello(&self) -> Option<String> {
        self.inner.lock().agent_hello().map(str::to_owned)
    }

    #[getter]
    fn failure(&self) -> Option<(&'static str, String)> {
        self.inner
            .lock()
            .failure()
            .map(|e| (e.code, e.message.clone()))
    }

    #[getter]
    fn cache_streams(&self) -> usize {
        self.inner.lock().cache_usage().0
    }

    #[getter]
    fn cache_bytes(&self) -> usize {
        self.inner.lock().cache_usage().1
    }

    #[getter]
    fn stream_bytes(&self) -> usize {
        self.inner.lock().config().stream_bytes
    }

    #[getter]
    fn max_streams(&self) -> usize {
        self.inner.lock().config().max_streams
    }

    #[getter]
    fn credit(&self) -> usize {
        self.inner.lock().config().credit
    }

    fn __repr__(&self) -> String {
        let channel = self.inner.lock();
        let (streams, bytes) = channel.cache_usage();
        format!(
            "AgentChannel(connected={}, failed={}, cache_streams={streams}, cache_bytes={bytes})",
            py_bool(channel.agent_hello().is_some()),
            py_bool(channel.failure().is_some()),
        )
    }
}

/// A page the agent sent as a response payload (`exec.read`), as a `Page`.
#[pyfunction]
fn parse_page(py: Python<'_>, data: &[u8]) -> PyResult<PyPage> {
    let page = py
        .detach(|| ReceivedPage::parse(data))
        .map_err(|e| page_error(e.message))?;
    Ok(PyPage::from_page(page.into_page()))
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

fn to_cursor(cursor: i64) -> PyResult<u64> {
    u64::try_from(cursor).map_err(|_| {
        PyValueError::new_err(format!(
            "cursor must be 0 or the seq of an event already seen; got {cursor}"
        ))
    })
}

/// The args as compact JSON (Python's encoder: exact for every JSON-like value it accepts).
fn dumps(py: Python<'_>, args: &Bound<'_, PyDict>) -> PyResult<String> {
    static DUMPS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let dumps = DUMPS.get_or_try_init(py, || {
        let json = py.import("json")?;
        let encoder = json.getattr("JSONEncoder")?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("separators", (",", ":"))?;
        kwargs.set_item("allow_nan", false)?;
        kwargs.set_item("ensure_ascii", false)?;
        Ok::<_, PyErr>(encoder.call((), Some(&kwargs))?.getattr("encode")?.unbind())
    })?;
    dumps.bind(py).call1((args,))?.extract()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyAgentChannel>()?;
    m.add_function(wrap_pyfunction!(parse_page, m)?)?;
    m.add("CHANNEL_KEEPALIVE_SECONDS", KEEPALIVE_SECONDS)?;
    Ok(())
}
