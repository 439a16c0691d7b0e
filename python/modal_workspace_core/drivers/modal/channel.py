"""The agent channel on Modal: one `sandbox.exec` of the agent's `connect` mode, its stdout pushed
to the agent client chunk by chunk as the SDK yields it (a pushed `Transport`, see `transports`)
and its stdin written as bytes, closed when it has sat idle.

The exec keeps the sandbox "active" while it runs, so an unused channel is closed (stdin EOF makes
`connect` exit) and the workspace can still reach its idle timeout; the next request opens a new
one. Idle means no bytes either way for a while and no request waiting for its response, which is
read from the frame headers (docs/protocol.md) flowing through.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from ...channel.transports import PushedReads, PushedTransport

__all__ = ["ChannelClient", "ExecChannel", "FrameCounter"]

log = logging.getLogger(__name__)

# The most stdin bytes handed to the SDK per write: each becomes one router call.
STDIN_CHUNK_BYTES = 1024 * 1024
# The frame kinds whose balance says whether the gateway still waits for an answer, and the
# gateway's keepalive, which does not make a channel busy (docs/protocol.md).
_REQUEST, _RESPONSE, _KEEPALIVE = 2, 3, 6
_HEADER = struct.Struct(">IB")  # len:u32 BE, kind:u8


class FrameCounter:
    """Follows one direction of the frame stream and counts frames of each kind.

    It reads only each frame's length and kind and skips the rest, so it costs nothing per byte
    and never holds more than the five header bytes it may be split across.
    """

    def __init__(self) -> None:
        self.kinds: dict[int, int] = {}
        self._skip = 0
        self._kind = 0  # the kind of the frame being skipped
        self._header = b""

    def feed(self, data: bytes) -> bool:
        """Counts the frames `data` starts; True when any of its bytes belong to a frame other
        than a keepalive (which says only that the gateway is there, and is no use)."""
        used = False
        view = memoryview(data)
        while view:
            if self._skip:
                step = min(self._skip, len(view))
                self._skip -= step
                view = view[step:]
                used = used or self._kind != _KEEPALIVE
                continue
            need = _HEADER.size - len(self._header)
            self._header += bytes(view[:need])
            view = view[need:]
            if len(self._header) < _HEADER.size:
                return used
            length, kind = _HEADER.unpack(self._header)
            self._header = b""
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            used = used or kind != _KEEPALIVE
            # `len` counts everything after the kind byte.
            self._skip, self._kind = length, kind
        return used


class ExecStdinWriter:
    """The asyncio `StreamWriter` surface over an exec's stdin.

    As with a socket, `write` starts sending at once (in a background task) and `drain` waits
    until everything written so far has been sent; writers that never drain are still sent.
    """

    def __init__(self, process: Any, on_bytes: Callable[[bytes], None]) -> None:
        self._process = process
        self._on_bytes = on_bytes
        self._buffer = bytearray()
        self._lock = asyncio.Lock()
        self._closing = False
        self._closed = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    def write(self, data: bytes) -> None:
        if self._closing:
            raise ConnectionResetError("the agent channel is closed")
        if self._error is not None:
            raise ConnectionResetError("the agent channel failed") from self._error
        self._buffer.extend(data)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send_quietly())

    async def _send_quietly(self) -> None:
        try:
            await self.drain()
        except Exception as exc:  # remembered; the next write or drain reports it
            self._error = exc

    def writelines(self, chunks: list[bytes]) -> None:
        for chunk in chunks:
            self.write(chunk)

    async def drain(self) -> None:
        if self._error is not None:
            raise ConnectionResetError("the agent channel failed") from self._error
        async with self._lock:
            while self._buffer:
                chunk = bytes(self._buffer[:STDIN_CHUNK_BYTES])
                del self._buffer[: len(chunk)]
                self._on_bytes(chunk)
                self._process.stdin.write(chunk)
                await self._process.stdin.drain.aio()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self._closing = True

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Send what is buffered, then EOF: the agent's `connect` exits when stdin ends."""
        if not self._closing:
            self._closing = True
            asyncio.get_running_loop().create_task(self._send_eof())

    async def _send_eof(self) -> None:
        try:
            await self.drain()
            async with self._lock:
                self._process.stdin.write_eof()
                await self._process.stdin.drain.aio()
        except Exception as exc:  # the exec or the sandbox is already gone: nothing to close
            log.debug("closing the agent channel's stdin failed: %s", type(exc).__name__)
        finally:
            self._closed.set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class ExecChannel:
    """One open `connect` exec: `transport` for the agent client (its stdout pushed, its stdin
    `writer`), an idle watchdog, and `closed`, which is set when the exec's output ends for any
    reason (after the transport has reported that end)."""

    def __init__(
        self,
        process: Any,
        *,
        idle_seconds: float,
        on_closed: Callable[[ExecChannel], None] | None = None,
    ) -> None:
        self.process = process
        self._on_closed = on_closed
        # Called instead of closing stdin directly when the channel has sat idle (the agent
        # client's `close`, so its owner sees it closed before the exec has even ended).
        self.on_idle: Callable[[], Awaitable[None]] | None = None
        self.idle_seconds = idle_seconds
        self._reads = PushedReads()
        self.writer = ExecStdinWriter(process, self._sent)
        self.transport = PushedTransport(self._reads, self.writer)
        self.closed = asyncio.Event()
        self.last_activity = time.monotonic()
        self._busy = 0
        self._sent_frames = FrameCounter()
        self._received_frames = FrameCounter()
        self._tasks = [
            asyncio.get_running_loop().create_task(self._pump()),
            asyncio.get_running_loop().create_task(self._watch_idle()),
        ]

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        """Marks a call of the channel's client in flight: a long-poll that waits on the
        client's cache sends no bytes, yet the channel must not idle out under it."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1
            self.last_activity = time.monotonic()

    @property
    def waiting_for_responses(self) -> int:
        """Requests sent whose responses have not arrived yet."""
        sent = self._sent_frames.kinds.get(_REQUEST, 0)
        return sent - self._received_frames.kinds.get(_RESPONSE, 0)

    def _sent(self, data: bytes) -> None:
        # A keepalive keeps the agent's connection open, not the channel: an unused channel
        # still closes after `idle_seconds`, so that the sandbox reaches its idle timeout.
        if self._sent_frames.feed(data):
            self.last_activity = time.monotonic()

    async def _pump(self) -> None:
        error: Exception | None = None
        try:
            async for chunk in self.process.stdout:
                self.last_activity = time.monotonic()
                self._received_frames.feed(chunk)
                self._reads.data(chunk)
        except Exception as exc:  # a broken exec is a closed channel; the caller reconnects
            log.debug("the agent channel's output ended: %s", type(exc).__name__)
            error = exc
        finally:
            # Cancelled (by `close`) counts as a normal end: nothing more will be read.
            self._reads.end(error)
            self.closed.set()
            if self._on_closed is not None:
                self._on_closed(self)

    async def _watch_idle(self) -> None:
        while not self.closed.is_set():
            now = time.monotonic()
            if self._busy or self.waiting_for_responses > 0:
                self.last_activity = now
            idle_for = now - self.last_activity
            if idle_for >= self.idle_seconds:
                log.debug("closing the agent channel after %.0f s idle", idle_for)
                if self.on_idle is not None:
                    with contextlib.suppress(Exception):
                        await self.on_idle()
                self.writer.close()
                return
            remaining = max(self.idle_seconds - idle_for, 0.05)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.closed.wait(), remaining)

    async def close(self) -> None:
        """Close stdin and wait (briefly) for the exec's output to end."""
        self.writer.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.closed.wait(), 10)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class ChannelClient:
    """The agent client of one channel as the service sees it: every call is marked in use on
    the channel, and everything else is the client's own."""

    def __init__(self, client: Any, channel: ExecChannel) -> None:
        self._client = client
        self._channel = channel

    async def request(self, *args: Any, **kwargs: Any) -> Any:
        with self._channel.in_use():
            return await self._client.request(*args, **kwargs)

    async def read_events(self, *args: Any, **kwargs: Any) -> Any:
        with self._channel.in_use():
            return await self._client.read_events(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)
