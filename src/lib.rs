//! modal-workspace-core: the rules that decide whether client input is safe, the event model,
//! the cursor ring, the channel protocol and the in-workspace agent. Logic lives in plain Rust
//! modules; `bindings` is the only Python edge.

pub mod agent;
pub mod channel;
pub mod event;
pub mod host_tree;
pub mod patch;
pub mod policy;
pub mod ring;

#[cfg(test)]
mod tests;

#[cfg(feature = "python")]
mod bindings;

#[cfg(feature = "python")]
use pyo3::prelude::*;

/// The extension module `modal_workspace_core._core`: registration only, no logic.
#[cfg(feature = "python")]
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    bindings::errors::register(m)?;
    bindings::policy::register(m)?;
    bindings::metric_line::register(m)?;
    bindings::ring::register(m)?;
    bindings::stream::register(m)?;
    bindings::agent::register(m)?;
    bindings::channel::register(m)?;
    bindings::host_tree::register(m)?;
    Ok(())
}
