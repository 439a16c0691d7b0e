pub mod files;
pub mod watch;
