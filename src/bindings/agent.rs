//! The agent for Python: `agent_main(argv)` runs `mwc-agent` without the GIL, and the table of
//! the agent's ops (`AGENT_OPS`, `REPEATABLE_AGENT_OPS`) the gateway's requests follow.

use pyo3::prelude::*;
use pyo3::types::{PyFrozenSet, PyTuple};

use crate::agent::ops::AgentOp;

/// Runs the `mwc-agent` command line (arguments without the program name) and returns its exit
/// code. The GIL is released for the whole run; the agent builds its own tokio runtime.
#[pyfunction]
fn agent_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    py.detach(|| crate::agent::cli::main(argv))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(agent_main, m)?)?;
    let py = m.py();
    let names = AgentOp::ALL.map(AgentOp::name);
    m.add("AGENT_OPS", PyTuple::new(py, names)?)?;
    let repeatable = AgentOp::ALL.into_iter().filter(|op| op.repeatable());
    m.add(
        "REPEATABLE_AGENT_OPS",
        PyFrozenSet::new(py, repeatable.map(AgentOp::name))?,
    )?;
    Ok(())
}
