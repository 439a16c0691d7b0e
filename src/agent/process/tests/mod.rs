//! Behaviour of supervised execs with real processes.
