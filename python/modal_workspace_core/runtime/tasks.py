"""The service's background work: tasks that outlive the call that started them, and claims
that keep one task per piece of work however many ways it was started.

Every task is cancelled when the service closes; a claim lasts until it is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from typing import Any

__all__ = ["Tasks"]


class Tasks:
    """One service's background tasks and claims."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        # A claimed key, and what its release sets (for `claim_within`).
        self._claimed: dict[str, asyncio.Event] = {}

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Runs `coro` in the background until it ends or the service closes."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def claim(self, key: str) -> bool:
        """True for the first claim of `key` until it is released: one task per piece of
        background work, however many ways it was started."""
        if key in self._claimed:
            return False
        self._claimed[key] = asyncio.Event()
        return True

    async def claim_within(self, key: str, seconds: float) -> bool:
        """`claim`, waiting up to `seconds` for a holder's release."""
        deadline = time.monotonic() + seconds
        while not self.claim(key):
            released = self._claimed[key]
            try:
                await asyncio.wait_for(released.wait(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                return False
        return True

    def release(self, key: str) -> None:
        released = self._claimed.pop(key, None)
        if released is not None:
            released.set()

    async def cancel_all(self) -> None:
        """Cancels every task and waits for each to end; none of their failures is raised."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
