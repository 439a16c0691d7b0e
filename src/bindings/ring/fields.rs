//! The extra fields of an event, from Python keyword arguments to JSON values: JSON-like types
//! only, string keys, bounded nesting, integers within 64 bits, finite floats.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// How deep `fields` may nest.
const MAX_FIELD_DEPTH: usize = 32;

pub(super) fn dict_to_map(dict: &Bound<'_, PyDict>, depth: usize) -> PyResult<Map<String, Value>> {
    let mut map = Map::new();
    for (key, value) in dict.iter() {
        let key: String = key
            .cast::<PyString>()
            .map_err(|_| PyValueError::new_err("event fields must have string keys"))?
            .to_str()?
            .to_owned();
        let value = to_json_value(&value, &key, depth + 1)?;
        map.insert(key, value);
    }
    Ok(map)
}

/// Converts a JSON-like Python value (None, bool, int, float, str, list, tuple, dict).
fn to_json_value(obj: &Bound<'_, PyAny>, field: &str, depth: usize) -> PyResult<Value> {
    if depth > MAX_FIELD_DEPTH {
        return Err(PyValueError::new_err(format!(
            "field '{field}' nests deeper than {MAX_FIELD_DEPTH} levels"
        )));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(n) = obj.extract::<i64>() {
            return Ok(Value::from(n));
        }
        if let Ok(n) = obj.extract::<u64>() {
            return Ok(Value::from(n));
        }
        return Err(PyValueError::new_err(format!(
            "field '{field}' holds an integer outside the 64-bit range"
        )));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        return Number::from_f64(f.value())
            .map(Value::Number)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "field '{field}' holds a float that JSON cannot carry"
                ))
            });
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_owned()));
    }
    if let Ok(list) = obj.cast::<PyList>() {
        return list
            .iter()
            .map(|v| to_json_value(&v, field, depth + 1))
            .collect();
    }
    if let Ok(tuple) = obj.cast::<PyTuple>() {
        return tuple
            .iter()
            .map(|v| to_json_value(&v, field, depth + 1))
            .collect();
    }
    if let Ok(dict) = obj.cast::<PyDict>() {
        return dict_to_map(dict, depth).map(Value::Object);
    }
    Err(PyValueError::new_err(format!(
        "field '{field}' must be JSON-like (None, bool, int, float, str, list, tuple, dict); \
         got {}",
        obj.get_type().name()?
    )))
}
