//! Why a ring (or a log built on one) refused a call: not a policy over client input, but a
//! bound, a cursor, or the stream's own order and end. An event the event model refuses (its
//! type or fields) is reported as that model's `PolicyError`, carried inside.

use std::fmt;

use crate::policy::PolicyError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RingError {
    /// The event itself was refused by the event model's rules.
    Event(PolicyError),
    /// A bound or a count the caller gave is not one the ring takes.
    Bound {
        rule: &'static str,
        message: &'static str,
    },
    /// The cursor is past the stream's last event.
    CursorAhead { cursor: u64, last_seq: u64 },
    /// The stream is closed: no more events can be appended.
    Closed,
    /// A mirror was given events that do not follow each other.
    MirrorOrder { previous: u64, seq: u64 },
    /// A log refused an append it cannot take (`rule` names why).
    Refused {
        rule: &'static str,
        message: &'static str,
    },
}

impl RingError {
    /// A stable name of what failed, as `PolicyError::rule` is for policies.
    pub fn rule(&self) -> &'static str {
        match self {
            Self::Event(e) => e.rule,
            Self::Bound { rule, .. } | Self::Refused { rule, .. } => rule,
            Self::CursorAhead { .. } => "ring.cursor-ahead",
            Self::Closed => "ring.closed",
            Self::MirrorOrder { .. } => "ring.mirror-order",
        }
    }

    pub fn message(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for RingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Event(e) => f.write_str(&e.message),
            Self::Bound { message, .. } | Self::Refused { message, .. } => f.write_str(message),
            Self::CursorAhead { cursor, last_seq } => write!(
                f,
                "cursor {cursor} is past the last event of this stream ({last_seq}); pass the \
                 next_cursor of a previous page, or 0 to read from the start"
            ),
            Self::Closed => f.write_str("the stream is closed: no more events can be appended"),
            Self::MirrorOrder { previous, seq } => write!(
                f,
                "mirrored events must be consecutive: seq {seq} followed {previous}"
            ),
        }
    }
}

impl std::error::Error for RingError {}

impl From<PolicyError> for RingError {
    fn from(e: PolicyError) -> Self {
        Self::Event(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_message_says_what_failed_with_the_numbers_involved() {
        let ahead = RingError::CursorAhead {
            cursor: 12,
            last_seq: 9,
        };
        let message = ahead.message();
        assert!(message.starts_with("cursor 12 is past"), "{message}");
        assert!(message.contains("(9)"), "{message}");
        let order = RingError::MirrorOrder {
            previous: 4,
            seq: 6,
        };
        assert_eq!(
            order.message(),
            "mirrored events must be consecutive: seq 6 followed 4"
        );
        assert_eq!(
            RingError::Closed.message(),
            "the stream is closed: no more events can be appended"
        );
        let bound = RingError::Bound {
            rule: "ring.max-bytes",
            message: "max_bytes must be positive",
        };
        assert_eq!(bound.message(), "max_bytes must be positive");
    }

    #[test]
    fn an_event_error_shows_the_event_models_own_message() {
        let policy = PolicyError::without_echo("event.type", "unknown event type");
        let err = RingError::from(policy.clone());
        assert_eq!(err.rule(), "event.type");
        assert_eq!(err.to_string(), policy.message);
        assert_eq!(err.message(), err.to_string());
    }
}
