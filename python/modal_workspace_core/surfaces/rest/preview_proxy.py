"""The preview proxy: a workspace's app, at the link `workspace_preview_url` answers on a driver
that relays ports (`<PREVIEW_ROUTE><ticket>/…`, the app's `/…`, on the preview's own host name:
`preview_hosts.py` sends a request here only from there), HTTP and WebSocket both.

The ticket in the path is the only credential (a browser has no bearer token, and one in a URL
would leak): it opens one declared port of one workspace until it expires, and only on the host
name of that workspace and port; each request and each WebSocket is checked again, so an
expired ticket stops working at once. The app's relative links and fetches stay under the
ticket's prefix, so they carry it. Each connection to the app is a relay the driver opens
(`operations.previews.open_preview`: locally the agent's, from inside the workspace), kept
alive between requests in a small pool per port; bodies stream both ways.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from html import escape
from typing import Any

import httpcore2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route, Router, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from ...errors import NotFoundError, PermissionDeniedError, WorkspaceError
from ...operations.previews import PREVIEW_ROUTE, PreviewTarget, open_preview, preview_target
from ...runtime.service import Service
from .body_limit import BodyLimit
from .preview_headers import request_headers, response_headers
from .preview_hosts import PREVIEW_HOST_KEY, PreviewHost
from .preview_websocket import relay_websocket

__all__ = ["PreviewProxy"]

_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
# The most ports with connections kept alive at once (the least recently used pool closes).
_POOLS = 32
# A request's timeouts towards the app: a response may be a long poll or a stream.
_TIMEOUTS = {"connect": 20.0, "read": 600.0, "write": 60.0, "pool": 30.0}

# What a refused ticket, a workspace gone, or an app that does not answer, shows.
_REFUSED = "This link is not valid: it may have expired. Ask for a new one."
_GONE = "This workspace is no longer available."
_NO_APP = (
    "Nothing answers on port {port} in the workspace. Start the app so that it listens on "
    "127.0.0.1:{port} (or localhost), then reload."
)
_PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Robots-Tag": "noindex, nofollow",
}


async def _to_slash(request: Request) -> Response:
    # The app's `/` is the ticket's prefix with its slash: relative links resolve under it.
    return RedirectResponse(request.path_params["ticket"] + "/", 307, _PAGE_HEADERS)


class _RelayBackend(httpcore2.AsyncNetworkBackend):
    """httpcore's network backend for one preview port: every connection is a relay the
    driver opens, whatever host the request names."""

    def __init__(self, service: Service, target: PreviewTarget) -> None:
        self.service = service
        self.target = target

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        reader, writer = await open_preview(self.service, self.target)
        return _RelayStream(reader, writer)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _RelayStream(httpcore2.AsyncNetworkStream):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            async with asyncio.timeout(timeout):
                return await self.reader.read(max_bytes)
        except TimeoutError:
            raise httpcore2.ReadTimeout("the app did not answer in time") from None
        except OSError as exc:
            raise httpcore2.ReadError(str(exc)) from None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        try:
            async with asyncio.timeout(timeout):
                self.writer.write(buffer)
                await self.writer.drain()
        except TimeoutError:
            raise httpcore2.WriteTimeout("the app did not take the request in time") from None
        except OSError as exc:
            raise httpcore2.WriteError(str(exc)) from None

    async def aclose(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()

    def get_extra_info(self, info: str) -> Any:
        # httpcore asks before it reuses a kept-alive connection: one the app closed meanwhile
        # has its end read already.
        if info == "is_readable":
            return self.reader.at_eof()
        return None


class PreviewProxy:
    """The proxy's routes, and the connections it keeps alive to the apps (`aclose` at the
    server's end)."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self._pools: OrderedDict[tuple[str, int], httpcore2.AsyncConnectionPool] = OrderedDict()

    def routes(self) -> list[BaseRoute]:
        return [
            Route(PREVIEW_ROUTE + "{ticket}", _to_slash, methods=_METHODS),
            Route(PREVIEW_ROUTE + "{ticket}/{path:path}", self.http, methods=_METHODS),
            WebSocketRoute(PREVIEW_ROUTE + "{ticket}/{path:path}", self.websocket),
        ]

    def app(self) -> ASGIApp:
        """What a preview's host name serves: these routes and nothing else (a request body
        bound as the gateway's own)."""
        return BodyLimit(Router(self.routes(), default=self.refused))

    @staticmethod
    async def refused(scope: Scope, receive: Receive, send: Send) -> None:
        """Any other path on a preview's host name, or any other name under the zone."""
        if scope["type"] == "websocket":
            await WebSocket(scope, receive, send).close(code=1008)
            return
        await _page("There is nothing here.", 404)(scope, receive, send)

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), OrderedDict()
        for pool in pools:
            await pool.aclose()

    async def _target(self, ticket: str, scope: Scope) -> PreviewTarget | Response:
        """The ticket's target, when it is for the workspace and port of the host name it was
        presented on (a ticket carried to another preview's name opens nothing there)."""
        named: PreviewHost | None = scope.get(PREVIEW_HOST_KEY)
        try:
            target = await preview_target(self.service, ticket)
        except WorkspaceError as err:
            return _refusal(err, None)
        if named is None or (named.workspace_id, named.port) != (target.workspace_id, target.port):
            return _page(_REFUSED, 403)
        return target

    def _pool(self, target: PreviewTarget) -> httpcore2.AsyncConnectionPool:
        key = (target.workspace_id, target.port)
        pool = self._pools.get(key)
        if pool is None:
            backend = _RelayBackend(self.service, target)
            pool = httpcore2.AsyncConnectionPool(
                network_backend=backend, max_connections=16, keepalive_expiry=15.0
            )
            self._pools[key] = pool
            while len(self._pools) > _POOLS:
                _, oldest = self._pools.popitem(last=False)
                asyncio.get_running_loop().create_task(oldest.aclose())
        self._pools.move_to_end(key)
        return pool

    async def http(self, request: Request) -> Response:
        ticket = request.path_params["ticket"]
        target = await self._target(ticket, request.scope)
        if isinstance(target, Response):
            return target
        prefix = _prefix(request.url.path, ticket)
        own_host = request.scope[PREVIEW_HOST_KEY].host.encode("latin-1")
        headers = request_headers(request.headers.raw, target.port, prefix, own_host)
        content: bytes | AsyncIterator[bytes] = b""
        if "content-length" in request.headers:
            content = _body(request)
        elif "transfer-encoding" in request.headers:
            headers.append((b"transfer-encoding", b"chunked"))
            content = _body(request)
        url = httpcore2.URL(
            scheme=b"http",
            host=b"localhost",
            port=target.port,
            target=_app_target(request, ticket),
        )
        outgoing = httpcore2.Request(
            request.method,
            url,
            headers=headers,
            content=content,
            extensions={"timeout": _TIMEOUTS},
        )
        try:
            response = await self._pool(target).handle_async_request(outgoing)
        except WorkspaceError as err:
            return _refusal(err, target.port)
        except (httpcore2.NetworkError, httpcore2.ProtocolError, httpcore2.TimeoutException):
            return _page(_NO_APP.format(port=target.port), 502)
        out = StreamingResponse(_stream(response), status_code=response.status)
        # The app's own headers, as `preview_headers` passes them (Starlette's defaults dropped).
        out.raw_headers = response_headers(response.headers, target.port, prefix)
        return out

    async def websocket(self, websocket: WebSocket) -> None:
        ticket = websocket.path_params["ticket"]
        target = await self._target(ticket, websocket.scope)
        if isinstance(target, Response):
            await websocket.close(code=1008)
            return
        await relay_websocket(
            websocket,
            lambda: open_preview(self.service, target),
            port=target.port,
            target=_app_target(websocket, ticket),
            own_host=websocket.scope[PREVIEW_HOST_KEY].host,
        )


async def _stream(response: httpcore2.Response) -> AsyncIterator[bytes]:
    """The app's body as it comes; the connection goes back to its pool (or closes) at the end,
    and also when the browser leaves first."""
    try:
        async for chunk in response.aiter_stream():
            yield chunk
    finally:
        await response.aclose()


async def _body(request: Request) -> AsyncIterator[bytes]:
    async for chunk in request.stream():
        if chunk:
            yield chunk


def _prefix(path: str, ticket: str) -> str:
    """The app's `/` as the browser reaches it: this request's path up to the ticket and its
    slash (a gateway served under a base path keeps it)."""
    marker = PREVIEW_ROUTE + ticket + "/"
    at = path.find(marker)
    return path[: at + len(marker)] if at >= 0 else marker


def _app_target(request: Request | WebSocket, ticket: str) -> bytes:
    """The request's target as the app gets it: the raw path after the prefix (escapes kept as
    the browser sent them), and the query."""
    raw: bytes = request.scope.get("raw_path") or request.url.path.encode()
    marker = (PREVIEW_ROUTE + ticket + "/").encode()
    at = raw.find(marker)
    rest = raw[at + len(marker) :] if at >= 0 else b""
    query: bytes = request.scope.get("query_string", b"")
    return b"/" + rest + (b"?" + query if query else b"")


def _refusal(err: WorkspaceError, port: int | None) -> Response:
    if isinstance(err, PermissionDeniedError):
        return _page(_REFUSED, 403)
    if isinstance(err, NotFoundError):
        return _page(_GONE, 404)
    if port is not None:
        return _page(_NO_APP.format(port=port), 502)
    return _page("The workspace cannot be reached just now. Try again in a moment.", 503)


def _page(text: str, status: int) -> Response:
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="referrer" content="no-referrer"><title>Preview</title></head>'
        f"<body><p>{escape(text)}</p></body></html>"
    )
    return HTMLResponse(body, status, _PAGE_HEADERS)
