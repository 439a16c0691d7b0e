"""The page of a stream's events that a client gets. The core's page already carries the
stream's state, return code and `done` (folded from the stream's own events as they were
appended or received) and writes the client's JSON itself: REST sends `to_json()` as it is, MCP
and the Python API get the `EventPage` model parsed from the same JSON.

Sending the core's JSON instead of building and validating a model of every event is what keeps
a woken long-poll cheap (bench/README.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from ..._core import Page
from .fields import (
    DEFAULT_PAGE_BYTES,
    DEFAULT_WAIT_SECONDS,
    Cursor,
    Input,
    MaxBytes,
    MaxEvents,
    Open,
    Output,
    WaitSeconds,
)
from .limits import Bound, Bounds

if TYPE_CHECKING:
    from ...runtime.service import Service

PAGE_LOOP = (
    "Loop from cursor=0 with each page's next_cursor until done. Use wait_seconds=25: an empty "
    "page means nothing new yet; has_more: call again now; cursor_expired: older events were "
    "dropped. Events hold data (text) or data_b64."
)
# The per-kind reads say the loop by reference: it is stream_events' (in every surface's list,
# GPT Actions' included), and a host pays for each tool's description in every conversation.
PAGE_LOOP_OF_STREAMS = "The same cursor loop as stream_events."
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
    type: str = Field(
        description="stdout, stderr, status, exit, error, fs, progress, metrics, reported, ..."
    )
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
        description="The stream's state as of this page (an exec: starting, running, then how "
        "it ended; a watch: watching, then how it ended).",
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
    wait_seconds: WaitSeconds = DEFAULT_WAIT_SECONDS
    max_events: MaxEvents = 1000
    max_bytes: MaxBytes = DEFAULT_PAGE_BYTES


class PageResult:
    """One page for a client: `to_json()` for REST, `model()` for everyone else. Both say the
    same (a test holds them to it)."""

    __slots__ = ("page",)

    def __init__(self, page: Page) -> None:
        self.page = page

    @property
    def state(self) -> str | None:
        return self.page.state

    @property
    def returncode(self) -> int | None:
        return self.page.returncode

    @property
    def done(self) -> bool:
        return self.page.done

    def model(self) -> EventPage:
        return EventPage.model_validate_json(self.page.to_client_json())

    def to_json(self) -> str:
        """`model().model_dump_json()`, without building the model."""
        return self.page.to_client_json()


async def stream_page(svc: Service, workspace_id: str, inp: EventsRead, stream: str) -> PageResult:
    """One page of an exec's or a watch's events as `inp` asks; the core's page carries the
    stream's state as of that page."""
    page = await svc.read_events(
        workspace_id,
        stream,
        inp.cursor,
        max_events=inp.max_events,
        max_bytes=inp.max_bytes,
        wait_seconds=inp.wait_seconds,
    )
    return PageResult(page)
