"""The page of a stream's events that a client gets: the agent's page, the stream's state as of
that page, and whether the client is done. REST sends its JSON composed around the events as
the agent encoded them; MCP and the Python API get the `EventPage` model.

Composing the JSON instead of building and validating a model of every event is what keeps a
woken long-poll cheap (the model's round trip, JSON to dicts to models to JSON, would be a large
share of a line's way from a process to a REST client: bench/README.md).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import Field

from .._core import Page
from ..surfaces.limits import Bound, Bounds
from .fields import (
    DEFAULT_PAGE_BYTES,
    Cursor,
    Input,
    MaxBytes,
    MaxEvents,
    Open,
    Output,
    WaitSeconds,
)

if TYPE_CHECKING:
    from ..service import Service

PAGE_LOOP = (
    "Loop: cursor=0, then each page's next_cursor, until done is true. Use wait_seconds=25 (it "
    "waits for new events): an empty page means nothing new yet, call again; has_more: call "
    "again now; cursor_expired: older events were dropped."
)
# GPT Actions' budget for a page: its JSON (the events as encoded) stays well under the limit.
PAGE_BOUNDS: Bounds = {"actions": {"max_bytes": Bound(64_000)}}


def _unset(value: Any) -> bool:
    return value is None


class Event(Open):
    """One event of a stream. It carries `data` or `data_b64` (or neither) as the agent wrote
    it; an absent twin is left out rather than sent as null."""

    seq: int = Field(description="The event's number in its stream (1, 2, …); cursors count these.")
    timestamp: str | float | None = Field(
        None, exclude_if=_unset, description="When the event happened (RFC 3339, UTC)."
    )
    type: str = Field(description="stdout, stderr, status, exit, error, fs, progress, ...")
    data: str | None = Field(None, exclude_if=_unset, description="Output or detail as UTF-8 text.")
    data_b64: str | None = Field(
        None, exclude_if=_unset, description="Output that is not UTF-8, base64-encoded."
    )


class EventPage(Output):
    events: list[Event] = Field(
        description="The events after your cursor, oldest first (may be empty)."
    )
    next_cursor: int = Field(description="Pass as cursor to the next call.")
    has_more: bool = Field(description="More events are ready now: call again at once.")
    done: bool = Field(description="The stream ended and its last event was delivered: stop.")
    state: str | None = Field(
        None,
        description="The stream's state as of this page: running (a watch: watching) while "
        "its events are output; from the exit event or the agent once it ends.",
    )
    returncode: int | None = Field(None, description="Set once the exec has ended.")
    first_seq: int = Field(default=0, description="The oldest event the stream still holds.")
    cursor_expired: bool = Field(False, description="Events after your cursor were dropped.")
    dropped_events: int = Field(
        default=0, description="Events after your cursor that were dropped (cursor_expired)."
    )
    dropped_bytes: int = Field(default=0, description="Bytes of output in the dropped events.")


class EventsRead(Input):
    cursor: Cursor = 0
    wait_seconds: WaitSeconds = 5
    max_events: MaxEvents = 1000
    max_bytes: MaxBytes = DEFAULT_PAGE_BYTES


# The state a stream is in while it is live: the state of its first `status` event.
_LIVE_STATES = frozenset({"running", "watching"})


def page_done(page: Page) -> bool:
    """True once the stream is closed and nothing is left after this page: the final event (an
    exec's `exit`) has then been delivered, in this page or an earlier one."""
    if page.has_more:
        return False
    if page.closed:
        return True
    return len(page) > 0 and page.events[-1].get("type") == "exit"


def state_shown(page: Page, live_state: str) -> dict[str, Any] | None:
    """The stream's state as a page's events show it, or None when only the agent can tell.

    Output and file events are written only while a stream is live, and an exec's `exit` event
    carries its final state and return code; a page that shows either needs no round trip to
    the agent (the common case: a long-poll woken by output). An empty page, or one whose last
    word is a closing or `lost` status, is answered from the agent's record instead.
    """
    if len(page) == 0:
        return None
    for event in reversed(page.events):
        kind = event.get("type")
        if kind == "exit":
            return {"state": event.get("state"), "returncode": event.get("returncode")}
        if kind == "status":
            state = event.get("state")
            return {"state": state} if state in _LIVE_STATES else None
    return {"state": live_state}


class PageResult:
    """One page for a client: `to_json()` for REST, `model()` for everyone else. Both say the
    same (a test holds them to it)."""

    __slots__ = ("page", "returncode", "state")

    def __init__(self, page: Page, state: str | None, returncode: int | None) -> None:
        self.page = page
        self.state = state
        self.returncode = returncode

    @property
    def done(self) -> bool:
        return page_done(self.page)

    def model(self) -> EventPage:
        page = self.page
        return EventPage.model_validate(
            {
                "events": page.events,
                "next_cursor": page.next_cursor,
                "has_more": page.has_more,
                "done": self.done,
                "state": self.state,
                "returncode": self.returncode,
                "first_seq": page.first_seq,
                "cursor_expired": page.cursor_expired,
                "dropped_events": page.dropped_events,
                "dropped_bytes": page.dropped_bytes,
            }
        )

    def to_json(self) -> str:
        """`model().model_dump_json()`, without building the model: the events are the agent's
        JSON as it is, the rest is written here in the model's field order."""
        page = self.page
        return (
            f'{{"events":{page.events_json()},"next_cursor":{page.next_cursor:d},'
            f'"has_more":{_flag(page.has_more)},"done":{_flag(self.done)},'
            f'"state":{json.dumps(self.state)},"returncode":{_int_or_null(self.returncode)},'
            f'"first_seq":{page.first_seq:d},"cursor_expired":{_flag(page.cursor_expired)},'
            f'"dropped_events":{page.dropped_events:d},"dropped_bytes":{page.dropped_bytes:d}}}'
        )


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _int_or_null(value: int | None) -> str:
    # The agent's return code is an int (or absent); anything else would not be valid JSON here.
    return "null" if value is None else f"{int(value):d}"


async def stream_page(
    svc: Service,
    workspace_id: str,
    inp: EventsRead,
    stream: str,
    status_op: str,
    id_arg: str,
    live_state: str,
) -> PageResult:
    """One page of an exec's or a watch's events as `inp` asks, with the stream's state as of
    that page (`live_state` while the page holds only output or file events)."""
    page = await svc.read_events(
        workspace_id,
        stream,
        inp.cursor,
        max_events=inp.max_events,
        max_bytes=inp.max_bytes,
        wait_seconds=inp.wait_seconds,
    )
    shown = state_shown(page, live_state)
    if shown is None:
        shown, _ = await svc.request(workspace_id, status_op, {id_arg: stream})
    return PageResult(page, shown.get("state"), shown.get("returncode"))
