//! Python bindings for the event ring: `EventRing` and `Page`; the asyncio wait and the
//! conversion of event fields live in the submodules.

mod dicts;
mod fields;
mod wait;

use std::sync::{Arc, LazyLock, OnceLock};
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList};
use serde_json::{Map, Value};

use super::errors::{policy_error, ring_error};
use super::stream::PyStreamKind;
use crate::event::{EventType, StreamState};
use crate::ring::{EventRing, Layout, Page};

/// The longest wait accepted, so a deadline can always be computed (one day).
const MAX_WAIT_SECONDS: f64 = 86_400.0;

/// Appends larger than this release the GIL while they are decoded and encoded.
const DETACH_APPEND_BYTES: usize = 64 * 1024;

/// A stream's events, bounded in encoded bytes; safe to share between threads and tasks.
/// Subclassed in Python (`ring.py`), which adds `wait_async`.
#[pyclass(
    frozen,
    subclass,
    name = "EventRing",
    module = "modal_workspace_core._core"
)]
pub struct PyEventRing {
    ring: Arc<EventRing>,
}

#[pymethods]
impl PyEventRing {
    #[new]
    #[pyo3(signature = (max_bytes, max_events=None, kind=None))]
    fn new(max_bytes: i64, max_events: Option<i64>, kind: Option<PyStreamKind>) -> PyResult<Self> {
        let max_bytes = usize::try_from(max_bytes)
            .map_err(|_| PyValueError::new_err("max_bytes must be a positive number of bytes"))?;
        let max_events = match max_events {
            None => None,
            Some(n) => Some(usize::try_from(n).map_err(|_| {
                PyValueError::new_err("max_events must be positive (or None for no limit)")
            })?),
        };
        let kind = kind.map(PyStreamKind::kind);
        let ring = EventRing::of_kind(kind, max_bytes, max_events).map_err(ring_error)?;
        Ok(Self {
            ring: Arc::new(ring),
        })
    }

    #[getter]
    fn max_bytes(&self) -> usize {
        self.ring.max_bytes()
    }

    #[getter]
    fn max_events(&self) -> Option<usize> {
        self.ring.max_events()
    }

    #[getter]
    fn kind(&self) -> Option<PyStreamKind> {
        self.ring.kind().map(PyStreamKind::from)
    }

    #[getter]
    fn closed(&self) -> bool {
        self.ring.is_closed()
    }

    #[getter]
    fn last_seq(&self) -> u64 {
        self.ring.last_seq()
    }

    #[pyo3(signature = (r#type, data=None, **fields))]
    fn append(
        &self,
        py: Python<'_>,
        r#type: &str,
        data: Option<&[u8]>,
        fields: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<u64> {
        let kind = EventType::parse(r#type).map_err(policy_error)?;
        // Output appends carry no fields: they share one empty map rather than build and drop
        // one per call.
        static NO_FIELDS: LazyLock<Map<String, Value>> = LazyLock::new(Map::new);
        let map = fields
            .map(|dict| fields::dict_to_map(dict, 0))
            .transpose()?;
        let fields = map.as_ref().unwrap_or(&NO_FIELDS);
        let ring = &self.ring;
        let result = match data {
            Some(bytes) if bytes.len() > DETACH_APPEND_BYTES => {
                py.detach(|| ring.append(kind, Some(bytes), fields))
            }
            _ => ring.append(kind, data, fields),
        };
        result.map_err(ring_error)
    }

    fn append_many(&self, r#type: &str, chunks: Vec<Bound<'_, PyBytes>>) -> PyResult<u64> {
        let kind = EventType::parse(r#type).map_err(policy_error)?;
        // Borrowed, not copied: the list keeps the bytes objects alive for the call.
        let slices: Vec<&[u8]> = chunks.iter().map(|b| b.as_bytes()).collect();
        self.ring.append_many(kind, &slices).map_err(ring_error)
    }

    fn close(&self) {
        self.ring.close();
    }

    #[pyo3(signature = (cursor, max_events=100, max_bytes=65_536, coalesce=false))]
    fn read(
        &self,
        cursor: i64,
        max_events: i64,
        max_bytes: i64,
        coalesce: bool,
    ) -> PyResult<PyPage> {
        let cursor = to_cursor(cursor)?;
        let max_events = usize::try_from(max_events)
            .map_err(|_| PyValueError::new_err("max_events must be at least 1"))?;
        // Negative budgets are as small as budgets get: raised to the minimum page size.
        let max_bytes = usize::try_from(max_bytes).unwrap_or(0);
        let page = self
            .ring
            .read(cursor, max_events, max_bytes, coalesce)
            .map_err(ring_error)?;
        Ok(PyPage::from_page(page))
    }

    fn wait(&self, py: Python<'_>, cursor: i64, timeout: f64) -> PyResult<bool> {
        let cursor = to_cursor(cursor)?;
        let timeout = to_timeout(timeout)?;
        let ring = Arc::clone(&self.ring);
        Ok(py.detach(move || ring.wait(cursor, timeout)))
    }

    /// Whether an event after `cursor` exists or the ring is closed, with `cursor` and `timeout`
    /// checked as `wait` checks them: the first step of `wait_async`.
    fn _ready(&self, cursor: i64, timeout: f64) -> PyResult<bool> {
        let cursor = to_cursor(cursor)?;
        to_timeout(timeout)?;
        Ok(self.ring.wait(cursor, Duration::ZERO))
    }

    /// Rings `bell` with `token` once `_ready(cursor)` would be true; `None` if it already is.
    fn _watch(
        &self,
        cursor: i64,
        bell: &wait::PyLoopBell,
        token: u64,
    ) -> PyResult<Option<wait::PyRingWatch>> {
        let cursor = to_cursor(cursor)?;
        Ok(wait::watch(&self.ring, cursor, bell, token))
    }

    fn __repr__(&self) -> String {
        format!(
            "EventRing(max_bytes={}, max_events={}, last_seq={}, closed={})",
            self.ring.max_bytes(),
            self.ring
                .max_events()
                .map_or_else(|| "None".to_owned(), |n| n.to_string()),
            self.ring.last_seq(),
            if self.ring.is_closed() {
                "True"
            } else {
                "False"
            },
        )
    }
}

/// A page read from a ring; `events` are dicts, `to_json()` the page as sent to clients.
#[pyclass(frozen, name = "Page", module = "modal_workspace_core._core")]
pub struct PyPage {
    page: Page,
    json: OnceLock<String>,
    client_json: OnceLock<String>,
    events: PyOnceLock<Py<PyList>>,
}

impl PyPage {
    /// Wraps a page built elsewhere (a page received from the agent, or read from its cache).
    pub(crate) fn from_page(page: Page) -> Self {
        Self {
            page,
            json: OnceLock::new(),
            client_json: OnceLock::new(),
            events: PyOnceLock::new(),
        }
    }
}

#[pymethods]
impl PyPage {
    /// The events as JSON-ready dicts, built once: directly for text output, through
    /// `json.loads` for the rest.
    #[getter]
    fn events(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
        let list = self
            .events
            .get_or_try_init(py, || dicts::event_dicts(py, &self.page).map(Bound::unbind))?;
        Ok(list.clone_ref(py))
    }

    #[getter]
    fn next_cursor(&self) -> u64 {
        self.page.next_cursor
    }

    #[getter]
    fn has_more(&self) -> bool {
        self.page.has_more
    }

    #[getter]
    fn first_seq(&self) -> u64 {
        self.page.first_seq
    }

    #[getter]
    fn cursor_expired(&self) -> bool {
        self.page.cursor_expired
    }

    #[getter]
    fn dropped_events(&self) -> u64 {
        self.page.dropped_events
    }

    #[getter]
    fn dropped_bytes(&self) -> u64 {
        self.page.dropped_bytes
    }

    #[getter]
    fn closed(&self) -> bool {
        self.page.closed
    }

    /// The stream's state as of this page (`None` only for a ring of no kind).
    #[getter]
    fn state(&self) -> Option<&'static str> {
        self.page.status.state.map(StreamState::as_str)
    }

    #[getter]
    fn returncode(&self) -> Option<i64> {
        self.page.status.returncode
    }

    #[getter]
    fn done(&self) -> bool {
        self.page.done()
    }

    fn to_json(&self) -> &str {
        self.json.get_or_init(|| self.page.to_json())
    }

    /// The page as clients get it (`results.EventPage`'s fields in order), written once.
    fn to_client_json(&self) -> &str {
        self.client_json
            .get_or_init(|| self.page.to_json_as(Layout::Client))
    }

    /// The events alone, as the JSON array `to_json()` holds: what a gateway wraps in its own
    /// envelope without building a Python object per event.
    fn events_json(&self) -> String {
        self.page.events_json()
    }

    fn __len__(&self) -> usize {
        self.page.events.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Page(events={}, next_cursor={}, has_more={}, cursor_expired={}, closed={}, \
             state={})",
            self.page.events.len(),
            self.page.next_cursor,
            self.page.has_more,
            self.page.cursor_expired,
            self.page.closed,
            self.page
                .status
                .state
                .map_or_else(|| "None".to_owned(), |s| format!("'{}'", s.as_str())),
        )
    }
}

fn to_cursor(cursor: i64) -> PyResult<u64> {
    u64::try_from(cursor).map_err(|_| {
        PyValueError::new_err(format!(
            "cursor must be 0 or the seq of an event already seen; got {cursor}"
        ))
    })
}

fn to_timeout(timeout: f64) -> PyResult<Duration> {
    if !(0.0..=MAX_WAIT_SECONDS).contains(&timeout) {
        return Err(PyValueError::new_err(format!(
            "timeout must be between 0 and {MAX_WAIT_SECONDS} seconds; got {timeout}"
        )));
    }
    Ok(Duration::from_secs_f64(timeout))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MIN_PAGE_BYTES", crate::ring::MIN_PAGE_BYTES)?;
    m.add_class::<PyEventRing>()?;
    m.add_class::<PyPage>()?;
    wait::register(m)
}
