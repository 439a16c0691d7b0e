//! Artifacts: a contained path packed into an archive in the agent's private staging directory
//! (never in the workspace) and read back in chunks, and an upload written there in chunks and
//! then extracted (every entry admitted by `policy::TarPlan` first) into a fresh directory
//! beside its destination, renamed into place so a reader sees all of it or nothing.
//!
//! Workspace access goes through fds beneath the root, as the `files` operations do: packing
//! walks with `O_NOFOLLOW` at every level and stores symlinks as symlinks; extraction creates
//! each entry by name in a directory fd it reached with `O_NOFOLLOW`.

mod pack;
mod staging;
pub(crate) mod sys;
mod unpack;

#[cfg(test)]
mod tests;

pub use pack::{pack, ListedEntry, PackLimits, PackSummary, MAX_LISTING};
pub use staging::{Staging, STAGING_MAX_AGE, STAGING_MAX_BYTES, STAGING_MAX_FILES};
pub use unpack::{unpack, UnpackFormat, UnpackOutcome};

/// The most one archive or upload may hold, whatever the gateway asks (its own setting is
/// lower): bounds the agent's staging directory.
pub const MAX_ARCHIVE_BYTES: u64 = 16 << 30;
/// The most entries one archive may hold, whatever the gateway asks.
pub const MAX_ARCHIVE_ENTRIES: u64 = 1_000_000;
