//! What a stream is (its kind, told from its id once) and what state its events have put it in:
//! the fold over an exec's `status` and `exit` events, or a watch's final `status`.

use serde::Deserialize;

use super::{Event, EventType};
use crate::policy::{check_id, IdKind, PolicyError};

/// The kinds of event stream. Every place that treats streams differently asks this, never the
/// id's prefix. (Git progress is to join as a kind of its own.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamKind {
    Exec,
    Watch,
    /// The progress of a long operation the gateway does (a snapshot), kept by the agent so
    /// that any gateway can read it: `progress` events, then an `exit` with its result.
    Task,
    /// A workspace's resource samples (`metrics` events), one stream per agent daemon, taken
    /// at an interval for as long as the daemon runs.
    Metrics,
}

impl StreamKind {
    pub const ALL: [StreamKind; 4] = [Self::Exec, Self::Watch, Self::Task, Self::Metrics];

    /// The kind of the stream `id` names, checked by the id rules (`ex-…`, `fw-…`, `tk-…` or
    /// `mt-…`).
    pub fn of(id: &str) -> Result<Self, PolicyError> {
        for kind in Self::ALL {
            if check_id(kind.id_kind().prefix(), id).is_ok() {
                return Ok(kind);
            }
        }
        Err(PolicyError::new(
            "stream.id",
            "a stream id is an exec id (ex-…), a watch id (fw-…), a task id (tk-…) or a \
             metrics stream id (mt-…), each followed by 32 lowercase hex digits",
            id,
        ))
    }

    /// The shape of every stream id (an OpenAPI `pattern`), from the id rules [`Self::of`] uses.
    pub fn id_pattern() -> String {
        crate::policy::id_pattern(&Self::ALL.map(Self::id_kind))
    }

    pub fn id_kind(self) -> IdKind {
        match self {
            Self::Exec => IdKind::Exec,
            Self::Watch => IdKind::Watch,
            Self::Task => IdKind::Task,
            Self::Metrics => IdKind::Metrics,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exec => "exec",
            Self::Watch => "watch",
            Self::Task => "task",
            Self::Metrics => "metrics",
        }
    }

    /// The agent keeps the stream's events on disk (an exec's log), so a reader further behind
    /// than a cache can still read them there; a watch, a task or a metrics stream has only
    /// its ring.
    pub fn has_log(self) -> bool {
        matches!(self, Self::Exec)
    }

    /// The state before any event says otherwise: an exec is `starting` until its `running`
    /// status, a watch is `watching` and a task or a metrics stream `running` from the start
    /// (a metrics stream is `running` while it is sampled).
    pub fn initial_state(self) -> StreamState {
        match self {
            Self::Exec => StreamState::Starting,
            Self::Watch => StreamState::Watching,
            Self::Task | Self::Metrics => StreamState::Running,
        }
    }

    /// The state while the stream produces output or file events.
    pub fn live_state(self) -> StreamState {
        match self {
            Self::Exec | Self::Task | Self::Metrics => StreamState::Running,
            Self::Watch => StreamState::Watching,
        }
    }
}

/// The states an exec or a watch can be in (docs/protocol.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StreamState {
    Starting,
    Running,
    Watching,
    Finished,
    Cancelled,
    Failed,
    TimedOut,
    Lost,
    RootRemoved,
}

impl StreamState {
    pub const ALL: [StreamState; 9] = [
        Self::Starting,
        Self::Running,
        Self::Watching,
        Self::Finished,
        Self::Cancelled,
        Self::Failed,
        Self::TimedOut,
        Self::Lost,
        Self::RootRemoved,
    ];

    /// The longest name, for the page envelope's bound.
    pub const MAX_NAME_LEN: usize = "root_removed".len();

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Watching => "watching",
            Self::Finished => "finished",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::Lost => "lost",
            Self::RootRemoved => "root_removed",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// The stream has ended in this state.
    pub fn is_final(self) -> bool {
        !matches!(self, Self::Starting | Self::Running | Self::Watching)
    }
}

/// A stream's state and return code as its events tell them. `state` is `None` only for a ring
/// of no known kind that no event has given a state yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamStatus {
    pub state: Option<StreamState>,
    /// From the `exit` event; an exec `lost` has none, a watch never has one.
    pub returncode: Option<i64>,
}

/// The fields of a `status` or `exit` event the fold reads (the rest are ignored).
#[derive(Deserialize)]
struct StateFields {
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    returncode: Option<i64>,
}

impl StreamStatus {
    /// The status of a stream of `kind` before its first event.
    pub fn initial(kind: Option<StreamKind>) -> Self {
        Self {
            state: kind.map(StreamKind::initial_state),
            returncode: None,
        }
    }

    /// The status just after `cursor`'s event when nothing newer is known: the kind's initial
    /// state from the start, its live state past it.
    pub fn assumed_at(kind: Option<StreamKind>, cursor: u64) -> Self {
        match cursor {
            0 => Self::initial(kind),
            _ => Self {
                state: kind.map(StreamKind::live_state),
                returncode: None,
            },
        }
    }

    /// Folds one event in: a `status` sets the state (a `lost` one also forgets any return
    /// code: nobody knows how the exec ended), an `exit` sets the state and the return code.
    /// Other events, and states this build does not know, change nothing.
    pub fn apply(&mut self, event: &Event) {
        let kind = event.kind();
        if !matches!(kind, EventType::Status | EventType::Exit) {
            return;
        }
        // Status and exit events are a few per stream: parsing their small JSON costs nothing.
        let Ok(fields) = serde_json::from_str::<StateFields>(event.json()) else {
            return;
        };
        let state = fields.state.as_deref().and_then(StreamState::parse);
        if kind == EventType::Exit {
            self.returncode = fields.returncode;
        }
        if let Some(state) = state {
            self.state = Some(state);
            if state == StreamState::Lost {
                self.returncode = None;
            }
        }
    }

    /// The status as of the last of a page's `events`. With nothing after the page
    /// (`has_more` false) that is the stream's `current` status. With more after it, the page's
    /// own events decide, from the kind's initial state (a page from seq 1) or its live one:
    /// a stream's events after its first `status` are output until its `exit`, so a page that
    /// more events follow is in the live state unless its own events say otherwise.
    pub fn at_page<'a>(
        kind: Option<StreamKind>,
        events: impl IntoIterator<Item = &'a Event>,
        has_more: bool,
        current: Self,
    ) -> Self {
        if !has_more {
            return current;
        }
        let mut events = events.into_iter().peekable();
        let first = events.peek().map_or(0, |e| e.seq());
        let mut status = Self::assumed_at(kind, first.saturating_sub(1));
        for event in events {
            status.apply(event);
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{encode, Fields, Payload};
    use serde_json::{json, Value};

    const TS: &str = "2026-11-29T10:04:45.123Z";

    fn event(seq: u64, kind: EventType, fields: Value) -> Event {
        let Value::Object(map) = fields else {
            panic!("fields are an object")
        };
        let payload = match kind.is_output() {
            true => Payload::Text("x"),
            false => Payload::None,
        };
        encode(seq, TS, kind, payload, &Fields::new(&map).unwrap())
    }

    fn exec_stream() -> Vec<Event> {
        vec![
            event(1, EventType::Status, json!({"state": "running", "pid": 7})),
            event(2, EventType::Stdout, json!({})),
            event(
                3,
                EventType::Exit,
                json!({"returncode": 3, "signal": null, "state": "finished"}),
            ),
            event(4, EventType::Status, json!({"state": "finished"})),
        ]
    }

    fn fold(kind: Option<StreamKind>, events: &[Event]) -> StreamStatus {
        let mut status = StreamStatus::initial(kind);
        events.iter().for_each(|e| status.apply(e));
        status
    }

    fn status(state: StreamState, returncode: Option<i64>) -> StreamStatus {
        StreamStatus {
            state: Some(state),
            returncode,
        }
    }

    #[test]
    fn kinds_come_from_the_id_rules() {
        let hex = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            StreamKind::of(&format!("ex-{hex}")).unwrap(),
            StreamKind::Exec
        );
        assert_eq!(
            StreamKind::of(&format!("fw-{hex}")).unwrap(),
            StreamKind::Watch
        );
        assert_eq!(
            StreamKind::of(&format!("tk-{hex}")).unwrap(),
            StreamKind::Task
        );
        assert_eq!(
            StreamKind::of(&format!("mt-{hex}")).unwrap(),
            StreamKind::Metrics
        );
        for bad in [
            "ex-",
            "fw-xyz",
            &format!("ws-{hex}"),
            &format!("ex-{hex}0"),
            "",
        ] {
            assert_eq!(StreamKind::of(bad).unwrap_err().rule, "stream.id", "{bad}");
        }
        assert!(StreamKind::Exec.has_log() && !StreamKind::Watch.has_log());
        assert!(!StreamKind::Task.has_log() && !StreamKind::Metrics.has_log());
    }

    #[test]
    fn the_id_pattern_matches_every_stream_id_and_nothing_else() {
        let pattern = regex::Regex::new(&StreamKind::id_pattern()).unwrap();
        let hex = "0123456789abcdef0123456789abcdef";
        for prefix in ["ex", "fw", "tk", "mt"] {
            assert!(pattern.is_match(&format!("{prefix}-{hex}")), "{prefix}");
        }
        for bad in [
            format!("ws-{hex}"),
            format!("ex-{hex}0"),
            format!("x ex-{hex}"),
        ] {
            assert!(!pattern.is_match(&bad), "{bad}");
        }
    }

    #[test]
    fn kinds_and_states_have_their_protocol_names() {
        let kinds = StreamKind::ALL.map(StreamKind::as_str);
        assert_eq!(kinds, ["exec", "watch", "task", "metrics"]);
        for state in StreamState::ALL {
            assert_eq!(StreamState::parse(state.as_str()), Some(state));
        }
    }

    #[test]
    fn only_the_states_a_stream_ends_in_are_final() {
        let live = [
            StreamState::Starting,
            StreamState::Running,
            StreamState::Watching,
        ];
        for state in StreamState::ALL {
            assert_eq!(state.is_final(), !live.contains(&state), "{state:?}");
        }
    }

    #[test]
    fn the_assumed_status_is_the_initial_one_at_the_start_and_the_live_one_after() {
        let exec = Some(StreamKind::Exec);
        assert_eq!(
            StreamStatus::assumed_at(exec, 0),
            status(StreamState::Starting, None)
        );
        assert_eq!(
            StreamStatus::assumed_at(exec, 5),
            status(StreamState::Running, None)
        );
        assert_eq!(StreamStatus::assumed_at(None, 5), StreamStatus::default());
    }

    #[test]
    fn an_exec_starts_then_runs_then_ends_as_its_exit_says() {
        let events = exec_stream();
        let exec = Some(StreamKind::Exec);
        assert_eq!(fold(exec, &[]), status(StreamState::Starting, None));
        assert_eq!(fold(exec, &events[..2]), status(StreamState::Running, None));
        let ended = status(StreamState::Finished, Some(3));
        assert_eq!(fold(exec, &events[..3]), ended);
        assert_eq!(
            fold(exec, &events),
            ended,
            "the final status keeps the code"
        );
    }

    #[test]
    fn a_lost_exec_has_no_return_code() {
        let events = [
            event(1, EventType::Status, json!({"state": "running", "pid": 7})),
            event(
                2,
                EventType::Exit,
                json!({"returncode": 0, "state": "finished"}),
            ),
            event(3, EventType::Status, json!({"state": "lost"})),
        ];
        let lost = fold(Some(StreamKind::Exec), &events);
        assert_eq!(lost, status(StreamState::Lost, None));
    }

    #[test]
    fn a_watch_watches_until_its_final_status_and_has_no_return_code() {
        let watch = Some(StreamKind::Watch);
        let fs = event(1, EventType::Fs, json!({"kind": "create", "path": "a"}));
        assert_eq!(fold(watch, &[]), status(StreamState::Watching, None));
        assert_eq!(
            fold(watch, std::slice::from_ref(&fs)),
            status(StreamState::Watching, None)
        );
        let end = event(
            2,
            EventType::Status,
            json!({"state": "root_removed", "returncode": 1}),
        );
        assert_eq!(
            fold(watch, &[fs, end]),
            status(StreamState::RootRemoved, None)
        );
    }

    #[test]
    fn a_metrics_stream_runs_and_its_samples_change_nothing() {
        let metrics = Some(StreamKind::Metrics);
        let sample = event(
            1,
            EventType::Metrics,
            json!({"state": "finished", "processes": 3}),
        );
        let running = status(StreamState::Running, None);
        assert_eq!(fold(metrics, &[]), running);
        assert_eq!(fold(metrics, &[sample]), running);
    }

    #[test]
    fn unknown_states_and_other_events_change_nothing() {
        let events = [
            event(1, EventType::Status, json!({"state": "running"})),
            event(2, EventType::Status, json!({"state": "dancing"})),
            event(3, EventType::Progress, json!({"state": "finished"})),
        ];
        let running = status(StreamState::Running, None);
        assert_eq!(fold(Some(StreamKind::Exec), &events), running);
        assert_eq!(fold(None, &[]), StreamStatus::default());
    }

    #[test]
    fn a_page_that_more_events_follow_is_told_by_its_own_events() {
        let events = exec_stream();
        let exec = Some(StreamKind::Exec);
        let current = fold(exec, &events);
        let at = |range: std::ops::Range<usize>, has_more| {
            StreamStatus::at_page(exec, &events[range], has_more, current)
        };
        assert_eq!(at(0..4, false), current);
        assert_eq!(at(0..1, true), status(StreamState::Running, None));
        assert_eq!(at(1..2, true), status(StreamState::Running, None));
        assert_eq!(at(1..3, true), status(StreamState::Finished, Some(3)));
        // Every prefix agrees with the fold of the whole stream up to its end.
        for end in 1..events.len() {
            assert_eq!(at(0..end, true), fold(exec, &events[..end]), "to {end}");
        }
    }
}
