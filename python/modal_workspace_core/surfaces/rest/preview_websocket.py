"""A browser's WebSocket passed through to a workspace's app: the gateway is the app's WebSocket
client (wsproto, sans-IO, over the relay the driver opens) and the browser's server (Starlette),
and passes whole messages both ways, closes with their codes, and answers the app's pings.

The browser's socket is accepted only once the app has accepted its own, with the subprotocol
the app chose; one the app refuses is refused to the browser too. A browser page of any other
origin (its `Origin`: the gateway's pages, another preview's) is refused before anything is
opened: a preview's WebSocket is the preview's own page's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.websockets import WebSocket, WebSocketDisconnect
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from ...errors import WorkspaceError
from .preview_headers import app_origin

__all__ = ["MAX_MESSAGE_BYTES", "relay_websocket"]

Opener = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]

# The largest message passed either way; a larger one closes the socket (1009, too big).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_READ_BYTES = 64 * 1024
# How long the app has to accept the socket.
_HANDSHAKE_SECONDS = 20.0
# Passed on to the app in its handshake, as a browser sent them.
_FORWARDED = (b"cookie", b"user-agent", b"accept-language")
# Close codes (RFC 6455 §7.4.1).
_POLICY, _TOO_BIG, _UNAVAILABLE, _ERROR = 1008, 1009, 1013, 1011


class _Refused(Exception):
    """The app did not accept the socket."""


async def relay_websocket(
    websocket: WebSocket, open_app: Opener, *, port: int, target: bytes, own_host: str
) -> None:
    """Serves `websocket` by passing it to the app on `port` (its request `target`), when it
    comes from a page of the preview's own host name `own_host` (`name[:port]`)."""
    if not _same_origin(websocket, own_host):
        await websocket.close(code=_POLICY)
        return
    try:
        reader, writer = await open_app()
    except WorkspaceError:
        await websocket.close(code=_UNAVAILABLE)
        return
    try:
        conn = WSConnection(ConnectionType.CLIENT)
        try:
            async with asyncio.timeout(_HANDSHAKE_SECONDS):
                subprotocol = await _handshake(conn, reader, writer, websocket, port, target)
        except (_Refused, TimeoutError, OSError):
            await websocket.close(code=_UNAVAILABLE)
            return
        await websocket.accept(subprotocol=subprotocol)
        await _carry(conn, reader, writer, websocket)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def _same_origin(websocket: WebSocket, own_host: str) -> bool:
    origin = websocket.headers.get("origin")
    if origin is None:
        return True  # not a browser: it has the ticket, which is what counts
    try:
        netloc = urlsplit(origin).netloc
    except ValueError:
        return False
    return netloc.lower() == own_host.lower()


async def _handshake(
    conn: WSConnection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    websocket: WebSocket,
    port: int,
    target: bytes,
) -> str | None:
    """The app's handshake, with the browser's subprotocols; the one the app chose."""
    headers = [(b"origin", app_origin(port))]
    headers += [(n, v) for n, v in websocket.headers.raw if n.lower() in _FORWARDED]
    writer.write(
        conn.send(
            Request(
                host=f"localhost:{port}",
                target=target.decode("latin-1"),
                subprotocols=list(websocket.scope.get("subprotocols") or []),
                extra_headers=headers,
            )
        )
    )
    await writer.drain()
    while True:
        for event in conn.events():
            if isinstance(event, AcceptConnection):
                return event.subprotocol
            if isinstance(event, RejectConnection | RejectData):
                raise _Refused()
        data = await reader.read(_READ_BYTES)
        if not data:
            raise _Refused()
        conn.receive_data(data)


async def _carry(
    conn: WSConnection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    websocket: WebSocket,
) -> None:
    """Messages both ways until either side closes; the other is then closed with its code."""
    from_app = asyncio.ensure_future(_from_app(conn, reader, writer, websocket))
    from_browser = asyncio.ensure_future(_from_browser(conn, writer, websocket))
    try:
        done, _ = await asyncio.wait({from_app, from_browser}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (from_app, from_browser):
            task.cancel()
        await asyncio.gather(from_app, from_browser, return_exceptions=True)
    if from_app in done and not from_app.cancelled():
        code = _close_code(from_app)
        with contextlib.suppress(RuntimeError, OSError):
            await websocket.close(code=code)
    elif conn.state is ConnectionState.OPEN:
        # The browser left (or broke a rule): the app is told so, briefly.
        with contextlib.suppress(Exception):
            writer.write(conn.send(CloseConnection(code=_close_code(from_browser))))
            await asyncio.wait_for(writer.drain(), 2.0)


def _close_code(task: asyncio.Future[int]) -> int:
    """The code a side closed with, as one that may be sent on (1005 and 1006 say a close had
    none, or never came: they never travel in a close frame)."""
    if task.cancelled() or task.exception() is not None:
        return _ERROR
    code = task.result()
    if code in (1005, 1006, 1015) or not 1000 <= code <= 4999:
        return 1000 if code == 1005 else _ERROR
    return code


async def _from_app(
    conn: WSConnection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    websocket: WebSocket,
) -> int:
    """The app's messages to the browser; the app's close code when it closes."""
    text: list[str] = []
    data = bytearray()
    size = 0
    while True:
        for event in conn.events():
            if isinstance(event, TextMessage | BytesMessage):
                if isinstance(event, TextMessage):
                    text.append(event.data)
                else:
                    data += event.data
                size += len(event.data)
                if size > MAX_MESSAGE_BYTES:
                    writer.write(conn.send(CloseConnection(code=_TOO_BIG)))
                    return _TOO_BIG
                if event.message_finished:
                    if isinstance(event, TextMessage):
                        await websocket.send_text("".join(text))
                    else:
                        await websocket.send_bytes(bytes(data))
                    text, data, size = [], bytearray(), 0
            elif isinstance(event, Ping):
                writer.write(conn.send(event.response()))
            elif isinstance(event, CloseConnection):
                if conn.state is ConnectionState.REMOTE_CLOSING:
                    writer.write(conn.send(event.response()))
                    await writer.drain()
                return event.code or 1000
        read = await reader.read(_READ_BYTES)
        if not read:
            return _ERROR  # the app's connection ended without a close
        conn.receive_data(read)


async def _from_browser(
    conn: WSConnection, writer: asyncio.StreamWriter, websocket: WebSocket
) -> int:
    """The browser's messages to the app; the browser's close code when it leaves."""
    while True:
        try:
            message = await websocket.receive()
        except WebSocketDisconnect as gone:
            return gone.code
        if message["type"] == "websocket.disconnect":
            return int(message.get("code") or 1000)
        text, data = message.get("text"), message.get("bytes")
        if text is not None:
            writer.write(conn.send(TextMessage(data=text)))
        elif data is not None:
            writer.write(conn.send(BytesMessage(data=data)))
        await writer.drain()
