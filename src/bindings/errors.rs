//! Maps the core's errors to Python exceptions, in this one place.

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::policy::PolicyError as RustPolicyError;

create_exception!(
    _core,
    PolicyError,
    PyValueError,
    "An input was refused by a policy. `rule` names the rule that failed."
);

/// Converts a policy rejection into `PolicyError(message)` with a `rule` attribute.
pub fn policy_error(err: RustPolicyError) -> PyErr {
    Python::attach(|py| {
        let exc = PolicyError::new_err(err.message.clone());
        let value = exc.value(py);
        if let Err(e) = value.setattr("rule", err.rule) {
            return e;
        }
        exc
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("PolicyError", m.py().get_type::<PolicyError>())?;
    Ok(())
}
