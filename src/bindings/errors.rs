//! Maps the core's errors to Python exceptions, in this one place.

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::policy::PolicyError as RustPolicyError;
use crate::ring::RingError as RustRingError;

create_exception!(
    _core,
    PolicyError,
    PyValueError,
    "An input was refused by a policy. `rule` names the rule that failed."
);

create_exception!(
    _core,
    RingError,
    PolicyError,
    "An event ring or log refused a call: a bound, a cursor past the end, an append after the \
     stream closed. `rule` names what failed. A `PolicyError`, as it was before it had a class \
     of its own."
);

/// Converts a ring's refusal into `RingError(message)` with a `rule` attribute; an event the
/// event model refused stays the model's `PolicyError`.
pub fn ring_error(err: RustRingError) -> PyErr {
    let rule = err.rule();
    let exc = match err {
        RustRingError::Event(e) => return policy_error(e),
        other => RingError::new_err(other.message()),
    };
    with_rule(exc, rule)
}

fn with_rule(exc: PyErr, rule: &'static str) -> PyErr {
    Python::attach(|py| match exc.value(py).setattr("rule", rule) {
        Ok(()) => exc,
        Err(e) => e,
    })
}

/// Converts a policy rejection into `PolicyError(message)` with a `rule` attribute.
pub fn policy_error(err: RustPolicyError) -> PyErr {
    with_rule(PolicyError::new_err(err.message), err.rule)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("PolicyError", m.py().get_type::<PolicyError>())?;
    m.add("RingError", m.py().get_type::<RingError>())?;
    Ok(())
}
