//! A page's events as Python dicts, built directly for text output (most events) and parsed
//! from their JSON with `json.loads` for the rest (fields, `data_b64`), in the order of the JSON.

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyString};

use crate::event::{json, Event, EventType};
use crate::ring::{Page, PageEvent};

/// The events of `page` as a list of dicts equal to `json.loads` of its events' JSON.
pub(super) fn event_dicts<'py>(py: Python<'py>, page: &Page) -> PyResult<Bound<'py, PyList>> {
    let mut builder = Builder {
        py,
        text: String::new(),
        last_stamp: None,
    };
    let mut dicts = Vec::with_capacity(page.events.len());
    for event in &page.events {
        dicts.push(builder.dict(event)?);
    }
    PyList::new(py, dicts)
}

struct Builder<'py> {
    py: Python<'py>,
    /// Unescaped text, reused from event to event.
    text: String,
    /// Consecutive events mostly share their millisecond: one string object serves them all.
    last_stamp: Option<Bound<'py, PyString>>,
}

impl<'py> Builder<'py> {
    fn dict(&mut self, event: &PageEvent) -> PyResult<Bound<'py, PyAny>> {
        let (first, last) = match event {
            PageEvent::One(one) => (one, one),
            PageEvent::Coalesced(parts) => match (parts.first(), parts.last()) {
                (Some(first), Some(last)) => (first, last),
                _ => return self.loads(event),
            },
        };
        let py = self.py;
        let data = match ascii_text(py, event)? {
            Some(data) => data,
            None if self.unescape(event) => PyString::new(py, &self.text),
            None => return self.loads(event),
        };
        let dict = PyDict::new(py);
        dict.set_item(intern!(py, "seq"), last.seq())?;
        if let PageEvent::Coalesced(_) = event {
            dict.set_item(intern!(py, "seq_start"), first.seq())?;
        }
        dict.set_item(intern!(py, "timestamp"), self.stamp(last))?;
        let kind = match last.kind() {
            EventType::Stderr => intern!(py, "stderr"),
            _ => intern!(py, "stdout"),
        };
        dict.set_item(intern!(py, "type"), kind)?;
        dict.set_item(intern!(py, "data"), data)?;
        Ok(dict.into_any())
    }

    /// Puts the text of a text output event (or of every part of a coalesced one) in
    /// `self.text`; false for any other event, or text it cannot unescape.
    fn unescape(&mut self, event: &PageEvent) -> bool {
        let parts = match event {
            PageEvent::One(one) => std::slice::from_ref(one),
            PageEvent::Coalesced(parts) => parts.as_slice(),
        };
        self.text.clear();
        parts.iter().all(|part| match part.coalescable_text() {
            Some(escaped) => json::unescape_into(&mut self.text, escaped),
            None => false,
        })
    }

    fn stamp(&mut self, event: &Event) -> Bound<'py, PyString> {
        let text = event.timestamp();
        match &self.last_stamp {
            Some(stamp) if stamp.to_str().is_ok_and(|s| s == text) => stamp.clone(),
            _ => {
                let stamp = PyString::new(self.py, text);
                self.last_stamp = Some(stamp.clone());
                stamp
            }
        }
    }

    /// The slowest path: the event's JSON through `json.loads`.
    fn loads(&self, event: &PageEvent) -> PyResult<Bound<'py, PyAny>> {
        static LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = self.py;
        let loads = LOADS.get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("json")?.getattr("loads")?.unbind())
        })?;
        let mut text = String::new();
        event.write_json(&mut text);
        loads.bind(py).call1((text,))
    }
}

/// The text of a text output event (or of every part of a coalesced one) as a `str`, unescaped
/// straight into the string's own buffer, when it is ASCII (almost all output): no
/// intermediate copy, and no second pass to check what is already known to be ASCII. `None`
/// for any other event or text: the caller takes the general way.
fn ascii_text<'py>(py: Python<'py>, event: &PageEvent) -> PyResult<Option<Bound<'py, PyString>>> {
    let parts = match event {
        PageEvent::One(one) => std::slice::from_ref(one),
        PageEvent::Coalesced(parts) => parts.as_slice(),
    };
    let mut texts = Vec::with_capacity(parts.len());
    for part in parts {
        match part.coalescable_text() {
            Some(text) if text.is_ascii() => texts.push(text),
            _ => return Ok(None),
        }
    }
    // Unescaping only shortens text: the escaped length is room enough.
    let room: usize = texts.iter().map(|t| t.len()).sum();
    let Ok(size) = ffi::Py_ssize_t::try_from(room) else {
        return Ok(None);
    };
    // SAFETY: PyUnicode_New(size, 127) returns a new, uninitialised compact ASCII string of
    // `size` one-byte characters (plus a terminating NUL it writes itself), or NULL with an
    // exception set; the GIL is held (`py`), and until it is returned no other code has it.
    let raw = unsafe { ffi::PyUnicode_New(size, 127) };
    if raw.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `raw` is a new reference (just checked not NULL) that we own.
    let string = unsafe { Bound::from_owned_ptr(py, raw) };
    // SAFETY: the data of a compact ASCII string of `size` characters is `size` bytes at
    // PyUnicode_DATA, valid for writes; `string` keeps it alive and is not shared yet.
    let data = unsafe {
        std::slice::from_raw_parts_mut(ffi::PyUnicode_DATA(string.as_ptr()).cast::<u8>(), room)
    };
    let mut len = 0;
    for text in texts {
        match json::unescape_ascii(&mut data[len..], text) {
            Some(n) => len += n,
            // Dropping `string` frees it: it was never seen by anyone.
            None => return Ok(None),
        }
    }
    if len == room {
        return Ok(Some(string.cast_into::<PyString>()?));
    }
    let mut raw = string.into_ptr();
    // SAFETY: `raw` is the only reference to a string no one has seen (refcount 1, hash not
    // computed), which PyUnicode_Resize shortens in place or replaces by a new one, updating
    // `raw`; on failure it leaves `raw` as it was, still ours, with an exception set. `len` is
    // at most its length, and its first `len` characters have all been written.
    let failed = unsafe { ffi::PyUnicode_Resize(&mut raw, len as ffi::Py_ssize_t) } != 0;
    // SAFETY: either way `raw` is a reference we own (to the shortened `str` on success).
    let string = unsafe { Bound::from_owned_ptr(py, raw) };
    if failed {
        return Err(PyErr::fetch(py));
    }
    Ok(Some(string.cast_into::<PyString>()?))
}
