//! The exec registry: every exec this daemon started or found on disk, with its record, its
//! durable log and its stdin queue. The daemon's `exec.*` ops all go through [`ExecRegistry`].

mod entry;
mod io;
mod meta;
mod prune;
mod record;
mod registry;
mod steps;

pub use prune::DEFAULT_MAX_ENDED_EXECS;
pub(super) use registry::ExecRegistry;

#[cfg(test)]
mod tests;
