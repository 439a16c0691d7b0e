//! Reading a request's JSON arguments with errors that name the argument, and the mapping of
//! the core's errors (policies, files, logs) to the protocol's error codes.

use serde_json::{Map, Value};

use crate::agent::exec_log::LogError;
use crate::agent::files::FileError;
use crate::channel::message::{ErrorBody, ErrorCode};
use crate::policy::PolicyError;
use crate::ring::RingError;

/// The longest duration a request may ask for (a year), so deadlines always compute.
const MAX_SECONDS: f64 = 365.0 * 86_400.0;

pub(crate) struct Args<'a>(pub(crate) &'a Map<String, Value>);

impl<'a> Args<'a> {
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    pub(crate) fn str(&self, name: &str) -> Result<Option<&'a str>, ErrorBody> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(ErrorBody::invalid(
                name,
                format!("'{name}' must be a string"),
            )),
        }
    }

    pub(crate) fn required_str(&self, name: &str) -> Result<&'a str, ErrorBody> {
        self.str(name)?
            .ok_or_else(|| ErrorBody::invalid(name, format!("'{name}' is required")))
    }

    pub(crate) fn u64(&self, name: &str) -> Result<Option<u64>, ErrorBody> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                ErrorBody::invalid(name, format!("'{name}' must be a non-negative integer"))
            }),
        }
    }

    pub(crate) fn usize(&self, name: &str, default: usize) -> Result<usize, ErrorBody> {
        Ok(self
            .u64(name)?
            .map_or(default, |n| usize::try_from(n).unwrap_or(usize::MAX)))
    }

    pub(crate) fn bool(&self, name: &str) -> Result<bool, ErrorBody> {
        match self.get(name) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(ErrorBody::invalid(
                name,
                format!("'{name}' must be true or false"),
            )),
        }
    }

    /// A number of seconds: finite, not negative, at most a year.
    pub(crate) fn seconds(&self, name: &str) -> Result<Option<std::time::Duration>, ErrorBody> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(s) if s.is_finite() && (0.0..=MAX_SECONDS).contains(&s) => {
                    Ok(Some(std::time::Duration::from_secs_f64(s)))
                }
                _ => Err(ErrorBody::invalid(
                    name,
                    format!("'{name}' must be a number of seconds between 0 and one year"),
                )),
            },
        }
    }

    pub(crate) fn strings(&self, name: &str) -> Result<Option<Vec<String>>, ErrorBody> {
        let bad = || ErrorBody::invalid(name, format!("'{name}' must be a list of strings"));
        match self.get(name) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned).ok_or_else(bad))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(bad()),
        }
    }

    pub(crate) fn get_array(&self, name: &str) -> Result<Option<&'a Vec<Value>>, ErrorBody> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(_) => Err(ErrorBody::invalid(name, format!("'{name}' must be a list"))),
        }
    }

    pub(crate) fn object(&self, name: &str) -> Result<Option<&'a Map<String, Value>>, ErrorBody> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(_) => Err(ErrorBody::invalid(
                name,
                format!("'{name}' must be an object"),
            )),
        }
    }
}

/// A policy refusal of the argument `field`.
pub(crate) fn policy(field: &str, e: PolicyError) -> ErrorBody {
    ErrorBody::invalid(field, e.message)
}

pub(crate) fn file_error(e: FileError) -> ErrorBody {
    ErrorBody::new(e.kind.code(), e.message)
}

pub(crate) fn log_error(e: LogError) -> ErrorBody {
    match e {
        LogError::Invalid(e @ RingError::CursorAhead { .. }) => {
            ErrorBody::invalid("cursor", e.message())
        }
        LogError::Invalid(e) => ErrorBody::new(ErrorCode::InvalidArgument, e.message()),
        LogError::Io(e) => {
            tracing::error!(error = %e, "exec log I/O error");
            ErrorBody::new(
                ErrorCode::Internal,
                format!("cannot read the exec log: {e}"),
            )
        }
    }
}

pub(crate) fn internal(what: &str, e: impl std::fmt::Display) -> ErrorBody {
    tracing::error!(error = %e, "{what}");
    ErrorBody::new(ErrorCode::Internal, format!("{what}: {e}"))
}
