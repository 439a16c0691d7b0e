"""Waiting for an exec to end: its stream followed from the status's last event to its `exit`,
woken by the event itself, never by polling the status.

Asks through whatever speaks to the agent (`AgentRequests`): the service, so that a request
made on the way is the service's like any other.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Protocol

from .._core import FINAL_STATES, Page

__all__ = ["AgentRequests", "exec_ended"]

# How an exec is followed: one long-poll at a time, a page as large as the agent sends.
_FOLLOW_WAIT = 25.0
_FOLLOW_PAGE_BYTES = 1_048_576


class AgentRequests(Protocol):
    """A workspace agent's requests and stream reads (`Service` and `Channels` both are)."""

    async def request(
        self, workspace_id: str, op: str, args: Mapping[str, Any], payload: bytes = b""
    ) -> tuple[dict[str, Any], bytes]: ...

    async def read_events(
        self,
        workspace_id: str,
        stream: str,
        cursor: int,
        *,
        max_events: int,
        max_bytes: int,
        wait_seconds: float,
    ) -> Page: ...


async def exec_ended(
    agent: AgentRequests,
    workspace_id: str,
    exec_id: str,
    *,
    within: float | None = None,
    command: bool = False,
) -> dict[str, Any]:
    """The exec's status once it has ended, or once `within` seconds have passed (None:
    however long it takes). `command` adds what it ran."""
    args = {"exec_id": exec_id, "command": command}
    status, _ = await agent.request(workspace_id, "exec.status", args)
    cursor = int(status.get("last_seq") or 0)
    deadline = None if within is None else time.monotonic() + within
    while status.get("state") not in FINAL_STATES:
        wait = _FOLLOW_WAIT if deadline is None else min(deadline - time.monotonic(), _FOLLOW_WAIT)
        if wait <= 0:
            break
        page = await agent.read_events(
            workspace_id,
            exec_id,
            cursor,
            max_events=10_000,
            max_bytes=_FOLLOW_PAGE_BYTES,
            wait_seconds=wait,
        )
        if page.closed or any(e.get("type") == "exit" for e in page.events):
            status, _ = await agent.request(workspace_id, "exec.status", args)
            break
        cursor = page.next_cursor
    return status
