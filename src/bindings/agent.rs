//! The agent's entry point for Python: `agent_main(argv)` runs `mwc-agent` without the GIL.

use pyo3::prelude::*;

/// Runs the `mwc-agent` command line (arguments without the program name) and returns its exit
/// code. The GIL is released for the whole run; the agent builds its own tokio runtime.
#[pyfunction]
fn agent_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    py.detach(|| crate::agent::cli::main(argv))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(agent_main, m)?)?;
    Ok(())
}
