//! The host's tree operations for Python (`copy_tree`, `tree_usage`, `remove_tree`,
//! `empty_dir`): each runs without the GIL; a refusal is a `TreeError` whose `kind` says why.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::create_exception;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::host_tree::{self, CopyOptions, Owner, Progress};

create_exception!(
    _core,
    TreeError,
    PyRuntimeError,
    "A host-side tree operation stopped. `kind` is `limit`, `no_space`, `cancelled` or `io`; the \
     message names entries by the display root it was given, never a host path."
);

fn tree_error(err: host_tree::TreeError) -> PyErr {
    let exc = TreeError::new_err(err.message);
    Python::attach(|py| match exc.value(py).setattr("kind", err.kind.name()) {
        Ok(()) => exc,
        Err(e) => e,
    })
}

/// How far a copy is (bytes written, entries met) and a way to stop it, from another thread.
#[pyclass(frozen, name = "TreeProgress", module = "modal_workspace_core._core")]
#[derive(Default)]
struct PyTreeProgress {
    inner: Arc<Progress>,
}

#[pymethods]
impl PyTreeProgress {
    #[new]
    fn new() -> Self {
        Self::default()
    }

    #[getter]
    fn bytes(&self) -> u64 {
        self.inner.bytes()
    }

    #[getter]
    fn entries(&self) -> u64 {
        self.inner.entries()
    }

    fn cancel(&self) {
        self.inner.cancel();
    }
}

#[pyfunction]
#[pyo3(signature = (source, target, *, display, max_bytes, max_entries, min_free_bytes=0, owner=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn copy_tree<'py>(
    py: Python<'py>,
    source: PathBuf,
    target: PathBuf,
    display: String,
    max_bytes: u64,
    max_entries: u64,
    min_free_bytes: u64,
    owner: Option<u32>,
    progress: Option<&Bound<'py, PyTreeProgress>>,
) -> PyResult<Bound<'py, PyDict>> {
    let options = CopyOptions {
        max_bytes,
        max_entries,
        min_free_bytes,
        owner: owner.map_or(Owner::Keep, |uid| Owner::Set(uid, uid)),
        display,
    };
    let progress = progress.map_or_else(|| Arc::new(Progress::new()), |p| p.get().inner.clone());
    let stats = py
        .detach(|| host_tree::copy_tree(&source, &target, &options, &progress))
        .map_err(tree_error)?;
    let out = PyDict::new(py);
    out.set_item("bytes", stats.bytes)?;
    out.set_item("files", stats.files)?;
    out.set_item("dirs", stats.dirs)?;
    out.set_item("symlinks", stats.symlinks)?;
    out.set_item("hardlinks", stats.hardlinks)?;
    out.set_item("skipped", stats.skipped)?;
    out.set_item("changed", stats.changed)?;
    Ok(out)
}

#[pyfunction]
#[pyo3(signature = (root, *, display, max_entries))]
fn tree_usage<'py>(
    py: Python<'py>,
    root: PathBuf,
    display: String,
    max_entries: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let usage = py
        .detach(|| host_tree::tree_usage(&root, &display, max_entries))
        .map_err(tree_error)?;
    let out = PyDict::new(py);
    out.set_item("bytes", usage.bytes)?;
    out.set_item("entries", usage.entries)?;
    out.set_item("truncated", usage.truncated)?;
    out.set_item("too_deep", usage.too_deep)?;
    Ok(out)
}

#[pyfunction]
#[pyo3(signature = (path, *, display))]
fn remove_tree(py: Python<'_>, path: PathBuf, display: String) -> PyResult<()> {
    py.detach(|| host_tree::remove_tree(&path, &display))
        .map_err(tree_error)
}

#[pyfunction]
#[pyo3(signature = (path, *, display))]
fn empty_dir(py: Python<'_>, path: PathBuf, display: String) -> PyResult<()> {
    py.detach(|| host_tree::empty_dir(&path, &display))
        .map_err(tree_error)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("TreeError", m.py().get_type::<TreeError>())?;
    m.add_class::<PyTreeProgress>()?;
    m.add_function(wrap_pyfunction!(copy_tree, m)?)?;
    m.add_function(wrap_pyfunction!(tree_usage, m)?)?;
    m.add_function(wrap_pyfunction!(remove_tree, m)?)?;
    m.add_function(wrap_pyfunction!(empty_dir, m)?)?;
    Ok(())
}
