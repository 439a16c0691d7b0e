"""Keeps one gateway process serving while clients hold connections open without finishing a
request (slowloris): a deadline for each request's head, a bound on its size, a bound on how
long a body may stall, and a cap on open connections that closes the oldest unfinished ones.

uvicorn's httptools protocol has none of these: a connection that never completes its headers
is held forever (its keep-alive timer starts only after a response), llhttp takes headers of any
size, and `limit_concurrency` answers 503 to everyone once the bound is reached, honest clients
included, while the half-open connections that reached it stay. Here the attacker's connections
are the ones that go: a connection whose request the app is working on is never closed for room.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import OrderedDict
from typing import Any, ClassVar, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = [
    "BODY_IDLE_SECONDS",
    "HEAD_SECONDS",
    "MAX_HEAD_BYTES",
    "ConnectionGuard",
    "GuardedHttpToolsProtocol",
    "connection_cap",
    "raise_fd_limit",
]

# A request's head (request line and headers) must arrive whole within this much of the
# connection's start (or, on a kept-alive connection, of the request's first byte).
HEAD_SECONDS = 10.0
# A body that brings no byte for this long is abandoned (an upload in progress never waits
# that long between reads on a working link).
BODY_IDLE_SECONDS = 30.0
# Larger heads get 431; every head the product's clients send is far smaller.
MAX_HEAD_BYTES = 64 * 1024
# At most this many connections per process, and at most half the descriptors the process may
# open: the other half is for agent channels, files and the connections accepted in one turn of
# the event loop before any is counted.
MAX_CONNECTIONS = 10_000
MIN_CONNECTIONS = 64

_WARN_EVERY = 60.0

log = logging.getLogger("modal_workspace_core.serving")


def raise_fd_limit() -> int:
    """Raises this process's soft limit on open descriptors to its hard limit (the kernel
    allows that without privilege); returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return soft if soft != resource.RLIM_INFINITY else wanted
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):
        return soft  # e.g. a hard limit above the kernel's nr_open: keep what we have
    return wanted


def connection_cap(fd_limit: int) -> int:
    """How many connections one process keeps open with `fd_limit` descriptors."""
    return max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, fd_limit // 2))


class ConnectionGuard:
    """The open connections of one server, oldest first; over the cap, the oldest that is not
    being served is closed to make room (the new one itself when every other is)."""

    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections
        self._open: OrderedDict[GuardedHttpToolsProtocol, None] = OrderedDict()
        self.closed_for_room = 0
        self._warned_at = -_WARN_EVERY

    def __len__(self) -> int:
        return len(self._open)

    def opened(self, connection: GuardedHttpToolsProtocol) -> None:
        self._open[connection] = None
        while len(self._open) > self.max_connections:
            victim = next((c for c in self._open if c.evictable()), connection)
            self._open.pop(victim, None)
            victim.close_for_room()
            self.closed_for_room += 1
            self._warn()
            if victim is connection:
                return

    def closed(self, connection: GuardedHttpToolsProtocol) -> None:
        self._open.pop(connection, None)

    def _warn(self) -> None:
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY:
            self._warned_at = now
            log.warning(
                "%d connections are open (the cap): closing the oldest unfinished ones (%d so far)",
                self.max_connections,
                self.closed_for_room,
            )


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the deadlines and bounds above. `guard` counts the
    server's connections: `guarded` gives a server its own (the default is one per process)."""

    guard: ClassVar[ConnectionGuard] = ConnectionGuard(MAX_CONNECTIONS)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reading_head = True
        self._head_bytes = 0
        self._last_read = 0.0
        self._deadline: asyncio.TimerHandle | None = None

    @classmethod
    def guarded(cls, guard: ConnectionGuard) -> type[GuardedHttpToolsProtocol]:
        """This protocol, for the server whose connections `guard` counts."""
        return cast(type[GuardedHttpToolsProtocol], type(cls.__name__, (cls,), {"guard": guard}))

    # --- the connection -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._last_read = self.loop.time()
        self._arm(HEAD_SECONDS, self._head_late)
        self.guard.opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.guard.closed(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._last_read = self.loop.time()
        super().data_received(data)
        if self._reading_head and not self.transport.is_closing():
            # Counted once the parser has taken the bytes, so that a body that came in the
            # same read as the end of its head does not count against the head.
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(b"431 Request Header Fields Too Large")

    def handle_websocket_upgrade(self) -> None:
        # From here the connection is the WebSocket protocol's (the terminal page's socket):
        # no request deadline applies, and its end is never reported to this protocol. The
        # guard forgets it now, as uvicorn's own bookkeeping does, rather than count it for
        # ever and, over the cap, abort a live socket as if it were an idle connection.
        self._disarm()
        self.guard.closed(self)
        super().handle_websocket_upgrade()

    def evictable(self) -> bool:
        """Whether closing it loses nothing the client finished: it is idle, or still sending
        a head or a body. A request the app holds whole is being served."""
        cycle = self.cycle
        if self._reading_head or cycle is None or cycle.response_complete:
            return True
        return bool(cycle.more_body)

    def close_for_room(self) -> None:
        self._disarm()
        self.transport.abort()

    # --- parser callbacks ---------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading_head = True
        if self._deadline is None:  # a kept-alive connection's next request starts its clock
            self._arm(HEAD_SECONDS, self._head_late)

    def on_headers_complete(self) -> None:
        self._reading_head = False
        self._head_bytes = 0
        self._disarm()
        super().on_headers_complete()
        if not self.transport.is_closing():
            self._arm(BODY_IDLE_SECONDS, self._body_stalled)

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    # --- deadlines ----------------------------------------------------------------------------

    def _arm(self, seconds: float, callback: Any) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, callback)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _head_late(self) -> None:
        self._deadline = None
        if not self._reading_head or self.transport.is_closing():
            return
        if self._head_bytes or self.cycle is not None:
            self._refuse(b"408 Request Timeout")
        else:
            self.transport.close()  # a connection that said nothing is just closed

    def _body_stalled(self) -> None:
        self._deadline = None
        cycle = self.cycle
        if cycle is None or not cycle.more_body or self.transport.is_closing():
            return
        idle = self.loop.time() - self._last_read
        if idle < BODY_IDLE_SECONDS or self.flow.read_paused:
            # Bytes came meanwhile, or the app has not taken what came: not the client's stall.
            self._arm(max(BODY_IDLE_SECONDS - idle, 1.0), self._body_stalled)
            return
        # The app reading the body sees the client gone (`http.disconnect`).
        self.transport.abort()

    def _refuse(self, status: bytes) -> None:
        self._disarm()
        self.transport.write(
            b"HTTP/1.1 " + status + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
        self.transport.close()
