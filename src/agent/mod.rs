//! The workspace agent: the supervisor that lives inside a workspace and owns its processes,
//! their durable logs, contained file access and watches.

pub mod archive;
pub mod cli;
pub mod connect;
pub mod daemon;
pub mod exec_log;
pub mod files;
pub mod ops;
pub mod process;
pub mod socket;
pub mod stage;
pub mod watch;
