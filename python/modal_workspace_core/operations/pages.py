"""The page of a stream's events that a client gets: the agent's page, the stream's state as of
that page, and whether the client is done. REST sends its JSON composed around the events as
the agent encoded them; MCP and the Python API get the `EventPage` model.

Composing the JSON instead of building and validating a model of every event is what keeps a
woken long-poll cheap: on a cold cache the model's round trip (JSON to dicts to models to JSON)
cost ~45 µs of the ~250 µs a line takes from a process to a REST client (bench/README.md).
"""

from __future__ import annotations

import json
from typing import Any

from .._core import Page
from ..results import EventPage

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
