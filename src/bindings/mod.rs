//! The Python edge of the core: conversions and registration, no rules of its own.

pub mod agent;
pub mod channel;
pub mod errors;
pub mod host_tree;
pub mod metric_line;
pub mod policy;
pub mod ring;
pub mod stream;
