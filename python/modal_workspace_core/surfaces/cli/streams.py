"""The cursor loop, as every command that follows a stream runs it: pages of events after a cursor
(a long-poll while following), until the page that says `done`; an event's bytes, text or not;
and an ended command's exit status as a shell reports it.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Mapping
from typing import Any

from .contract import Client

__all__ = ["EXEC_EVENTS", "STREAM_EVENTS", "event_bytes", "exit_status", "pages"]

EXEC_EVENTS = "workspace_realtime_exec_events"
STREAM_EVENTS = "stream_events"
# The longest a page waits for a first event (the operations' own bound).
WAIT_SECONDS = 25.0
# A command with no exit code of its own: it never started, or its end was lost.
NO_EXIT_CODE = 125


async def pages(
    client: Client,
    read: str,
    ids: Mapping[str, str],
    *,
    cursor: int = 0,
    follow: bool = True,
) -> AsyncIterator[dict[str, Any]]:
    """The stream's pages from `cursor` on, through the operation `read` with `ids` (its
    workspace and stream). Following: until the page that says `done`. Not following: only
    what is there now, until a page has nothing more ready."""
    while True:
        page = await client.call(
            read,
            {**ids, "cursor": cursor, "wait_seconds": WAIT_SECONDS if follow else 0},
        )
        yield page
        cursor = int(page.get("next_cursor", cursor))
        if page.get("done"):
            return
        if not follow and not page.get("has_more"):
            return


def event_bytes(event: Mapping[str, Any]) -> bytes:
    """An output event's bytes: its `data` as UTF-8, or its `data_b64` (bytes that are not)."""
    if isinstance(event.get("data"), str):
        return str(event["data"]).encode()
    if isinstance(event.get("data_b64"), str):
        return base64.b64decode(event["data_b64"])
    return b""


def exit_status(returncode: int | None) -> int:
    """A command's exit status as a shell gives it: its code, 128 + N when signal N ended it
    (`returncode` -N), `NO_EXIT_CODE` when it has none."""
    if returncode is None:
        return NO_EXIT_CODE
    if returncode < 0:
        return 128 + min(-returncode, 127)
    return returncode & 0xFF
