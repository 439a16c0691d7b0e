"""`EventRing` as the package exports it: the compiled ring plus `wait_async` for asyncio.

`wait_async` is written here so that the extension never calls Python code and no thread ever
takes the GIL to wake a loop: an append on any thread rings the loop's doorbell (a byte in a pipe
the loop watches), and the loop's own thread resolves the futures from Python frames. Before
Python 3.14 a thread that waits for the GIL while the interpreter finalizes is made to exit, and
an exit that unwinds through extension frames aborts the process.
"""

import asyncio
import contextlib
import itertools
import os
import threading
import weakref

from . import _core


class _Doorbell:
    """One event loop's doorbell and the futures waiting for it to ring, by token."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.bell = _core._LoopBell()
        self.futures: dict[int, asyncio.Future[bool]] = {}
        self._tokens = itertools.count()
        fd = self.bell.fileno()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._rung)

    def add(self, future: "asyncio.Future[bool]") -> int:
        token = next(self._tokens)
        self.futures[token] = future
        return token

    def _rung(self) -> None:
        # The byte first, then the tokens: a ring in between is taken now, one after it writes a
        # new byte (the doorbell's contract).
        with contextlib.suppress(BlockingIOError):
            os.read(self.bell.fileno(), 64)
        for token in self.bell.take():
            future = self.futures.pop(token, None)
            if future is not None and not future.done():
                future.set_result(True)


# Weak keys: a loop's doorbell (and its pipe) goes when the loop does.
_doorbells: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Doorbell]" = (
    weakref.WeakKeyDictionary()
)
_doorbells_lock = threading.Lock()


def _doorbell(loop: asyncio.AbstractEventLoop) -> _Doorbell:
    with _doorbells_lock:
        doorbell = _doorbells.get(loop)
        if doorbell is None:
            doorbell = _doorbells[loop] = _Doorbell(loop)
        return doorbell


class EventRing(_core.EventRing):
    """A stream's events numbered `seq = 1, 2, 3, …`, bounded in encoded bytes (and optionally
    in count); the oldest are evicted first, never the newest. Share it between threads and
    tasks freely.

    Raises `PolicyError` (a `ValueError`) when `max_bytes` or `max_events` is not positive.
    """

    __slots__ = ()

    def wait_async(self, cursor: int, timeout: float) -> "asyncio.Future[bool]":
        """`wait` as an awaitable, for asyncio code: a future of the running event loop (call it
        from the loop's thread), resolved with True by the append or close that makes the ring
        ready (on any thread), or with the ring's readiness at `timeout`. Cancelling it leaves
        nothing behind."""
        ready = self._ready(cursor, timeout)  # checks both arguments as `wait` does
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        if ready or timeout == 0:
            future.set_result(ready)
            return future
        doorbell = _doorbell(loop)
        token = doorbell.add(future)
        watch = self._watch(cursor, doorbell.bell, token)
        if watch is None:  # an append on another thread came in between
            del doorbell.futures[token]
            future.set_result(True)
            return future
        timer = loop.call_later(timeout, self._time_out, future, cursor)

        def forget(_: "asyncio.Future[bool]") -> None:
            # However the wait ended (rung, timed out or cancelled): nothing stays behind.
            watch.cancel()
            timer.cancel()
            doorbell.futures.pop(token, None)

        future.add_done_callback(forget)
        return future

    def _time_out(self, future: "asyncio.Future[bool]", cursor: int) -> None:
        if not future.done():
            future.set_result(self.wait(cursor, 0.0))
