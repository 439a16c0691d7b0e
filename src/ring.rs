//! The byte-budgeted cursor ring with waiting readers.
