//! The metric lines a command prints (`policy::metric_line`) for Python: one line, or a stream's
//! bytes read line by line. Conversions only: the rules are the core's, the agent's too.

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::policy::{self, MetricLine, MetricLineReader};

/// What one line says as Python has it: `{}` not a metric line, `None` refused, else the values.
fn said<'py>(py: Python<'py>, line: MetricLine) -> PyResult<Option<Bound<'py, PyDict>>> {
    let out = PyDict::new(py);
    match line {
        MetricLine::Other => {}
        MetricLine::Refused => return Ok(None),
        MetricLine::Values(values) => {
            for (name, value) in values {
                out.set_item(name, value)?;
            }
        }
    }
    Ok(Some(out))
}

/// The metrics of one output line (without its newline): `{}` for a line that is not a metric
/// line, `None` for one that says it is and does not parse.
#[pyfunction]
fn metric_line<'py>(line: &Bound<'py, PyString>) -> PyResult<Option<Bound<'py, PyDict>>> {
    // A lone surrogate is no character of a name or a number: read as U+FFFD, it is refused.
    said(line.py(), policy::metric_line(&line.to_string_lossy()))
}

/// One output stream read for metric lines, as the agent reads it.
#[pyclass(frozen, name = "MetricLines", module = "modal_workspace_core._core")]
#[derive(Default)]
struct PyMetricLines {
    reader: Mutex<MetricLineReader>,
}

impl PyMetricLines {
    fn found<'py>(py: Python<'py>, lines: Vec<MetricLine>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for line in lines {
            out.append(said(py, line)?)?;
        }
        Ok(out)
    }
}

#[pymethods]
impl PyMetricLines {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    /// The metric lines that `data`, the stream's next bytes, completes.
    fn feed<'py>(&self, py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyList>> {
        let mut lines = Vec::new();
        self.reader.lock().feed(data, &mut |line| lines.push(line));
        Self::found(py, lines)
    }

    /// The stream ended: its last line, if it had no newline and is a metric line.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut lines = Vec::new();
        self.reader.lock().finish(&mut |line| lines.push(line));
        Self::found(py, lines)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(metric_line, m)?)?;
    m.add_class::<PyMetricLines>()?;
    m.add("METRIC_PREFIX", policy::METRIC_PREFIX)?;
    m.add("MAX_METRIC_LINE_BYTES", policy::MAX_METRIC_LINE_BYTES)?;
    m.add("MAX_METRIC_NAMES", policy::MAX_METRIC_NAMES)?;
    Ok(())
}
