//! Python bindings for stream kinds: `StreamKind`, told from a stream id by the core's id rules,
//! so that no Python code tells an exec from a watch by the id's prefix.

use pyo3::prelude::*;
use pyo3::types::PyFrozenSet;

use super::errors::policy_error;
use crate::event::{StreamKind, StreamState};

/// What kind of event stream an id names.
#[pyclass(
    eq,
    from_py_object,
    frozen,
    hash,
    name = "StreamKind",
    module = "modal_workspace_core._core"
)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum PyStreamKind {
    #[pyo3(name = "EXEC")]
    Exec,
    #[pyo3(name = "WATCH")]
    Watch,
    #[pyo3(name = "TASK")]
    Task,
    #[pyo3(name = "METRICS")]
    Metrics,
}

impl PyStreamKind {
    pub(crate) fn kind(self) -> StreamKind {
        match self {
            Self::Exec => StreamKind::Exec,
            Self::Watch => StreamKind::Watch,
            Self::Task => StreamKind::Task,
            Self::Metrics => StreamKind::Metrics,
        }
    }
}

impl From<StreamKind> for PyStreamKind {
    fn from(kind: StreamKind) -> Self {
        match kind {
            StreamKind::Exec => Self::Exec,
            StreamKind::Watch => Self::Watch,
            StreamKind::Task => Self::Task,
            StreamKind::Metrics => Self::Metrics,
        }
    }
}

#[pymethods]
impl PyStreamKind {
    /// The kind of the stream `stream_id` names; `PolicyError` (rule `stream.id`) for anything
    /// that is not an exec, a watch, a task or a metrics stream id.
    #[staticmethod]
    fn of(stream_id: &str) -> PyResult<Self> {
        StreamKind::of(stream_id)
            .map(Self::from)
            .map_err(policy_error)
    }

    /// The shape of every stream id (a schema's `pattern`): what `of` accepts.
    #[staticmethod]
    fn id_pattern() -> String {
        StreamKind::id_pattern()
    }

    /// `"exec"`, `"watch"`, `"task"` or `"metrics"`.
    #[getter]
    fn value(&self) -> &'static str {
        self.kind().as_str()
    }

    /// The agent keeps the stream's events on disk (an exec's log); a watch, a task or a
    /// metrics stream has only its ring.
    #[getter]
    fn has_log(&self) -> bool {
        self.kind().has_log()
    }

    fn __repr__(&self) -> String {
        format!("StreamKind.{}", self.kind().as_str().to_uppercase())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyStreamKind>()?;
    let finals: Vec<&str> = StreamState::ALL
        .into_iter()
        .filter(|s| s.is_final())
        .map(StreamState::as_str)
        .collect();
    m.add("FINAL_STATES", PyFrozenSet::new(m.py(), &finals)?)
}
