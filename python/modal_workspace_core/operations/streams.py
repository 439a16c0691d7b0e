"""Any stream's events, whatever its kind: one read operation that later stream kinds reuse
(the per-kind reads, `workspace_realtime_exec_events` and `workspace_file_watch_events`, stay
for the clients that know them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .machinery.fields import StreamId, WorkspaceId
from .machinery.pages import PAGE_BOUNDS, PAGE_LOOP, EventsRead, PageResult, stream_page
from .machinery.table import READ, WS, Declarations

if TYPE_CHECKING:
    from ..runtime.service import Service

declare = Declarations()


class StreamEvents(EventsRead):
    workspace_id: WorkspaceId
    stream_id: StreamId


@declare(
    method="GET",
    path=WS + "/streams/{stream_id}/events",
    hints=READ,
    summary="Read any stream after a cursor (long-poll).",
    limits=PAGE_LOOP,
    bounds=PAGE_BOUNDS,
)
async def stream_events(svc: Service, inp: StreamEvents) -> PageResult:
    return await stream_page(svc, inp.workspace_id, inp, inp.stream_id)
