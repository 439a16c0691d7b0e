//! Every rule that decides whether a client's input is safe to hand to a shell, git or the disk.
//! Each function returns the input in canonical form or a [`PolicyError`] naming the rule.

mod error;

pub use error::{echo, PolicyError, ECHO_CHARS};
