//! A page's events as Python dicts, built directly for text output (most events) and parsed
//! from their JSON with `json.loads` for the rest (fields, `data_b64`), in the order of the JSON.

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
        if !self.unescape(event) {
            return self.loads(event);
        }
        let py = self.py;
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
        dict.set_item(intern!(py, "data"), PyString::new(py, &self.text))?;
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

    /// The slow path: the event's JSON through `json.loads`.
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
