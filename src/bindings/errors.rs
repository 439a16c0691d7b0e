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

create_exception!(
    _core,
    ChannelRefusal,
    PyValueError,
    "The agent channel refused a call for its arguments (`code`: `invalid_argument`, or `limit` \
     when a bound is full), or a page that cannot be read (`code`: `internal`)."
);

create_exception!(
    _core,
    ChannelFailure,
    pyo3::exceptions::PyConnectionError,
    "The agent channel cannot go on (`code`: the protocol's error code, such as `closed`)."
);

/// A channel's refusal as `ChannelRefusal` (the caller's argument) or `ChannelFailure` (the
/// channel has failed), with the protocol's error code as `code`.
pub fn channel_error(err: crate::channel::client::ChannelError) -> PyErr {
    let exc = match err.code {
        "invalid_argument" | "limit" => ChannelRefusal::new_err(err.message),
        _ => ChannelFailure::new_err(err.message),
    };
    with_attr(exc, "code", err.code)
}

/// A page the agent sent that cannot be read: `ChannelRefusal` with code `internal`.
pub fn page_error(message: String) -> PyErr {
    with_attr(ChannelRefusal::new_err(message), "code", "internal")
}

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
    with_attr(exc, "rule", rule)
}

fn with_attr(exc: PyErr, name: &str, value: &'static str) -> PyErr {
    Python::attach(|py| match exc.value(py).setattr(name, value) {
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
    m.add("ChannelRefusal", m.py().get_type::<ChannelRefusal>())?;
    m.add("ChannelFailure", m.py().get_type::<ChannelFailure>())?;
    Ok(())
}
