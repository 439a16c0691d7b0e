"""How `modal-workspace serve` puts the app on uvicorn: each response leaves in one write, and
its access-log line is written after it, not before.

uvicorn writes a response's head as soon as the app starts the response, and its body in a
second write; and it logs the request before writing either. A woken long-poll therefore paid
for a log line and two sends (and its client for two wake-ups) before the client had its page,
a large share of a line's way from a process to a REST client (bench/README.md). Here the head
waits for the body (or for the end of the loop's turn, for a streamed response), and the line
is logged a moment after the response is out, in uvicorn's own format and on its
`uvicorn.access` logger.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import urllib.parse
from collections.abc import Callable
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..operations.experiment_page import PAGE_ROUTE
from ..operations.terminal import TERMINAL_ROUTE
from .http_shutdown import StoppingServer, Unfinished
from .rest.connection_guard import (
    ConnectionGuard,
    GuardedHttpToolsProtocol,
    connection_cap,
    raise_fd_limit,
)
from .serving_gc import settle_for_serving

# A held write is joined with the next one only while both are small (a head and a page); a
# large body goes out as it is, after what was held, rather than be copied to join them.
_JOIN_LIMIT = 64 * 1024

# How long an access-log line waits to be written with the others of its moment (`AccessLog`).
_LOG_DELAY = 0.001

_access = logging.getLogger("uvicorn.access")


class CoalescingTransport:
    """A transport whose writes wait for the next write, or the end of the loop's turn, and
    then leave together: a response's head and body in one `send`."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held, self._held = self._held, None
        if held is None:
            if len(data) < _JOIN_LIMIT:
                self._held = bytes(data)
                self._loop.call_soon(self._flush)
            else:
                self._transport.write(data)
        elif len(held) + len(data) <= _JOIN_LIMIT:
            self._transport.write(held + bytes(data))
        else:
            self._transport.write(held)
            self._transport.write(data)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def writelines(self, lines: list[bytes]) -> None:
        self.write(b"".join(lines))

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def __getattr__(self, name: str) -> Any:
        # Everything else (extra info, reading, flow control, `set_protocol` on an upgrade) is
        # the transport's own.
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(GuardedHttpToolsProtocol):
    """uvicorn's httptools protocol (with the guard's deadlines and connection cap) over a
    `CoalescingTransport`, leaving the access log to `AccessLog`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.access_log = False  # `AccessLog` writes the line, after the response

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        coalescing = CoalescingTransport(transport, self.loop)
        super().connection_made(coalescing)  # type: ignore[arg-type]


class AccessLog:
    """ASGI middleware: one `uvicorn.access` line per HTTP request, in uvicorn's format, written
    a moment after its response has gone, not on its way.

    A log line is costly on the cold cache of a woken long-poll; written at once, it held up
    the client (which then often waits for this CPU). Lines are kept for
    `delay` seconds and written together, which lands them in the gap before the next event
    of a stream; under a steady load the same work is only batched. Nothing is dropped: what
    is kept is written at the end of the app's lifespan too.
    """

    def __init__(self, app: ASGIApp, delay: float = _LOG_DELAY) -> None:
        self.app = app
        self.delay = delay
        self._lines: list[tuple[str, str, str, str, int]] = []
        self._flush_at: asyncio.TimerHandle | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            try:
                await self.app(scope, receive, send)
            finally:
                self.flush()
            return
        if scope["type"] != "http" or not _access.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        status = 500  # what uvicorn answers if the app fails before it starts a response

        async def noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting_status)
        finally:
            line = (_client(scope), scope["method"], _path_with_query(scope))
            self._lines.append((*line, scope["http_version"], status))
            if self._flush_at is None:
                self._flush_at = asyncio.get_running_loop().call_later(self.delay, self.flush)

    def flush(self) -> None:
        """Writes the lines kept so far."""
        if self._flush_at is not None:
            self._flush_at.cancel()
            self._flush_at = None
        lines, self._lines = self._lines, []
        for client, method, path, version, status in lines:
            _access.info('%s - "%s %s HTTP/%s" %d', client, method, path, version, status)


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else ""


# A download link's token and a page's ticket are capabilities: the log names the route, never
# them (what follows a ticket, `run.json` or `plot.png`, is kept). The terminal's socket takes
# its ticket in a header, which no log line writes.
_CAPABILITY_PREFIXES = (
    ("/artifact-links/", "<token>"),
    (PAGE_ROUTE, "<ticket>"),
    (TERMINAL_ROUTE, "<ticket>"),
)


def _path_with_query(scope: Scope) -> str:
    path = urllib.parse.quote(scope["path"])  # uvicorn's path holds its root path already
    for prefix, shown in _CAPABILITY_PREFIXES:
        at = path.find(prefix)
        if at >= 0:
            start = at + len(prefix)
            end = path.find("/", start)
            path = path[:start] + shown + (path[end:] if end >= 0 else "")
            break
    query: bytes = scope.get("query_string", b"")
    return f"{path}?{query.decode('ascii', 'replace')}" if query else path


def serve(
    app: ASGIApp,
    sockets: list[socket.socket],
    on_stop: Callable[[], None] = lambda: None,
) -> None:
    """Runs `app` on uvicorn over `sockets` (bound already, `http_listen`) until interrupted;
    `on_stop` ends the app's long-polls when the server stops (`http_shutdown`)."""
    # Every connection costs a descriptor: take all the process may have, and keep the number
    # of connections well below it (`connection_guard`).
    guard = ConnectionGuard(connection_cap(raise_fd_limit()))
    unfinished = Unfinished(app)
    config = uvicorn.Config(
        AccessLog(unfinished),
        http=CoalescingHttpToolsProtocol.guarded(guard),
        log_level="info",
        # The app trusts proxy headers from the configured proxies only (`forwarded`).
        proxy_headers=False,
        # The responses say nothing of the server's software.
        server_header=False,
    )
    server = StoppingServer(config, unfinished, on_stop)
    settle_for_serving()
    # uvicorn raises the signal that stopped it again once it is done (SIGINT as
    # KeyboardInterrupt): the stop is the one the user asked for, not an error.
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=sockets)
    if not server.started:
        # The app's startup failed (uvicorn logged why); uvicorn's own exit status for it.
        raise SystemExit(3)
