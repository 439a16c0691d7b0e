"""Reading execs' durable logs on the agent (`exec.read`): for cursors older than the client's
cache, and long-polled for streams the cache has no room for."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .._core import ChannelRefusal, Page, StreamKind, parse_page
from ..errors import AgentError

# The longest wait of one `exec.read` (the agent's own cap), and how much later than its wait
# the answer may come before the read gives up on it.
_LOG_WAIT_MAX = 25.0
_LOG_WAIT_MARGIN = 10.0

# `exec.read` long-polls in flight at once: well below the 64 requests the agent handles at once
# per connection, so that other requests (input, subscriptions) are still read.
_LOG_POLLS = 32

Request = Callable[..., Awaitable[tuple[dict[str, Any], bytes]]]


class AgentLog:
    """The agent's logs, read through one client's `request`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, request: Request) -> None:
        self._loop = loop
        self._request = request
        self._polls = asyncio.Semaphore(_LOG_POLLS)

    async def poll(
        self, stream_id: str, cursor: int, max_events: int, max_bytes: int, deadline: float
    ) -> Page:
        """Long-polls an exec's log on the agent until `deadline` (or 25 s, the agent's cap),
        for a stream the cache has no room for. Long-polls hold requests open at the agent,
        which handles a bounded number per connection: past `_LOG_POLLS` a reader waits for a
        turn, and reads without waiting when its deadline comes first."""
        remaining = deadline - self._loop.time()
        try:
            async with asyncio.timeout(max(0.0, remaining)):
                await self._polls.acquire()
        except TimeoutError:
            return await self.read(stream_id, cursor, max_events, max_bytes, None)
        try:
            wait = min(max(0.0, deadline - self._loop.time()), _LOG_WAIT_MAX)
            return await self.read(stream_id, cursor, max_events, max_bytes, None, wait)
        finally:
            self._polls.release()

    async def read(
        self,
        stream_id: str,
        cursor: int,
        max_events: int,
        max_bytes: int,
        cached: Page | None,
        wait_seconds: float = 0.0,
    ) -> Page:
        """Reads an exec's durable log on the agent, long-polling it for `wait_seconds` (at
        most 25). Watches have no log: their cache's own page (which says what it no longer
        holds) is the answer."""
        if not StreamKind.of(stream_id).has_log:
            if cached is None:
                raise AgentError("invalid_argument", "cursor is past the end of the stream")
            return cached
        args: Mapping[str, Any] = {
            "exec_id": stream_id,
            "cursor": cursor,
            "max_events": max_events,
            "max_bytes": max_bytes,
        }
        timeout = None
        if wait_seconds > 0:
            args = {**args, "wait_seconds": wait_seconds}
            # The agent answers when its wait ends; a lost answer must not hold the caller.
            timeout = wait_seconds + _LOG_WAIT_MARGIN
        _, payload = await self._request("exec.read", args, timeout=timeout)
        try:
            return parse_page(payload)
        except ChannelRefusal as e:
            raise AgentError(e.code, f"exec.read returned a malformed page: {e}") from None
