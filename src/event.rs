//! The event model: what a stream carries and its JSON framing.
