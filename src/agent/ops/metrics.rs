//! The `metrics.*` requests: the workspace's metrics stream as it stands (its id, interval and
//! latest sample), and the interval it is sampled at.

use std::time::Duration;

use super::args::Args;
use crate::channel::message::ErrorBody;

/// The interval a daemon samples at unless told otherwise.
pub(crate) const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);
/// The shortest interval: below it the sampler's own cost stops being negligible.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_millis(500);
/// The longest interval: a sample a minute still shows what a workspace is doing.
pub(crate) const MAX_INTERVAL: Duration = Duration::from_secs(60);

/// An interval of `seconds` within the bounds, or why not (naming `field`).
pub(crate) fn interval(field: &str, seconds: f64) -> Result<Duration, ErrorBody> {
    let min = MIN_INTERVAL.as_secs_f64();
    let max = MAX_INTERVAL.as_secs_f64();
    if !seconds.is_finite() || !(min..=max).contains(&seconds) {
        return Err(ErrorBody::invalid(
            field,
            format!("'{field}' is a number of seconds from {min} to {max} (got {seconds})"),
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// `metrics.set`: a new sampling interval, taken from the next sample on.
#[derive(Debug)]
pub(crate) struct MetricsSetRequest {
    pub(crate) interval: Duration,
}

impl MetricsSetRequest {
    pub(crate) fn parse(a: &Args<'_>) -> Result<Self, ErrorBody> {
        let field = "interval_seconds";
        let seconds = match a.0.get(field) {
            Some(value) => value.as_f64().ok_or_else(|| {
                ErrorBody::invalid(field, format!("'{field}' must be a number of seconds"))
            })?,
            None => return Err(ErrorBody::invalid(field, format!("'{field}' is required"))),
        };
        Ok(Self {
            interval: interval(field, seconds)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Map, Value};

    fn parse(v: Value) -> Result<MetricsSetRequest, ErrorBody> {
        let map: Map<String, Value> = match v {
            Value::Object(map) => map,
            _ => unreachable!("tests pass objects"),
        };
        MetricsSetRequest::parse(&Args(&map))
    }

    #[test]
    fn an_interval_within_the_bounds_is_taken() {
        for (seconds, millis) in [(0.5, 500), (2.0, 2000), (60.0, 60_000)] {
            let request = parse(json!({"interval_seconds": seconds})).unwrap();
            assert_eq!(request.interval, Duration::from_millis(millis));
        }
    }

    #[test]
    fn an_interval_outside_the_bounds_is_refused_naming_them() {
        for bad in [
            json!(0.49),
            json!(60.5),
            json!(0),
            json!(-1),
            json!("2"),
            json!(null),
        ] {
            let err = parse(json!({ "interval_seconds": bad })).unwrap_err();
            assert_eq!(err.field.as_deref(), Some("interval_seconds"), "{bad}");
        }
        let err = parse(json!({"interval_seconds": 0.1})).unwrap_err();
        assert!(err.message.contains("0.5 to 60"), "{}", err.message);
        assert!(parse(json!({})).is_err());
    }
}
