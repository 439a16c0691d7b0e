"""The long-polls of an `AgentClient` waiting on its streams: parked until the reader reports a
change of their stream, or their timeout."""

from __future__ import annotations

import asyncio


class StreamWaiters:
    """Waiters per stream, woken together. One future and one timer per wait, not an Event and
    a timeout scope: a reader that keeps up with a flood waits once or twice per page."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._by_stream: dict[str, list[asyncio.Future[None]]] = {}

    async def wait(self, stream_id: str, timeout: float) -> None:
        """Waits for `wake(stream_id)` or the timeout. The caller read the cache just before,
        with no await in between: no wake-up is missed."""
        waiters = self._by_stream.get(stream_id)
        if waiters is None:
            waiters = self._by_stream[stream_id] = []
        woken: asyncio.Future[None] = self._loop.create_future()
        waiters.append(woken)
        timer = self._loop.call_later(timeout, _resolve_once, woken)
        try:
            await woken
        finally:
            timer.cancel()
            if not woken.done():
                woken.cancel()
            # The last waiter to give up removes the entry, so streams polled once and never
            # woken do not accumulate.
            if self._by_stream.get(stream_id) is waiters:
                waiters.remove(woken)
                if not waiters:
                    del self._by_stream[stream_id]

    def wake(self, stream_id: str) -> None:
        for woken in self._by_stream.pop(stream_id, ()):
            _resolve_once(woken)

    def __len__(self) -> int:
        """How many streams have a waiter."""
        return len(self._by_stream)

    def wake_all(self) -> None:
        for stream_id in list(self._by_stream):
            self.wake(stream_id)


def _resolve_once(future: asyncio.Future[None]) -> None:
    """Ends a wait (on a wake-up or at its timeout, whichever comes first)."""
    if not future.done():
        future.set_result(None)
