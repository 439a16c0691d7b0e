"""The operation routes served ahead of FastAPI's router: a request whose method and path name an
operation (its ids matching their core patterns) goes straight to that operation's server, and
everything else (the schemas, `/healthz`, MCP, raw byte routes, and the 404/405/400 of paths
that match no operation) goes on to FastAPI.

Why: a woken long-poll is CPU on one gateway process, paid once per poller. FastAPI's router
tries each route in turn, and its exception middleware, exit stack and request and response
objects come on top; with a thousand pollers on one exec that was most of each poller's share
of the gateway (bench/README.md, "Many pollers"). The operation's server is the same one the
FastAPI route hands its request to (`OperationServer`): one parse, one run, one answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ...errors import WorkspaceError
from .routes import OperationServer, path_pattern

__all__ = ["OperationDispatch"]

_JSON = (b"content-type", b"application/json")
Route = tuple[re.Pattern[str], OperationServer]


class OperationDispatch:
    """ASGI middleware: serves the operation routes (all but the raw byte ones) itself and passes
    everything else on to `app`. A `WorkspaceError` is answered in the error shape every route
    uses; anything else propagates, to become a 500."""

    def __init__(
        self, app: ASGIApp, servers: Sequence[OperationServer], prefix: str = "/api"
    ) -> None:
        self.app = app
        # By method, then by the number of the path's segments: a request is matched against
        # the few routes of its own shape, not against every route.
        self.routes: dict[str, dict[int, list[Route]]] = {}
        for server in servers:
            if server.op.raw is not None:
                continue
            template = prefix + server.op.path
            shapes = self.routes.setdefault(server.op.method, {})
            shapes.setdefault(template.count("/"), []).append((_compiled(template, server), server))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            shapes = self.routes.get(scope["method"])
            if shapes is not None:
                for pattern, server in shapes.get(path.count("/"), ()):
                    match = pattern.fullmatch(path)
                    if match is not None:
                        await _serve(server, match.groupdict(), scope, receive, send)
                        return
        await self.app(scope, receive, send)


async def _serve(
    server: OperationServer, path_params: dict[str, str], scope: Scope, receive: Receive, send: Send
) -> None:
    try:
        body = b"" if server.in_query else await Request(scope, receive).body()
        text = await server(query(scope), body, path_params)
    except WorkspaceError as err:
        # As FastAPI's handler answers it (`app.create_app`).
        await JSONResponse(err.to_dict(), status_code=err.status)(scope, receive, send)
        return
    encoded = text.encode()
    length = (b"content-length", str(len(encoded)).encode())
    await send({"type": "http.response.start", "status": 200, "headers": [_JSON, length]})
    await send({"type": "http.response.body", "body": encoded})


def query(scope: Scope) -> dict[str, str]:
    """The query string's fields, the last of a repeated one winning (as Starlette's
    `QueryParams` reads it, without building one)."""
    return dict(parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True))


def _compiled(template: str, server: OperationServer) -> re.Pattern[str]:
    """`/api/workspaces/{workspace_id}/…` as a pattern whose groups take exactly what the core's
    rule for each id accepts (the same pattern the route documents)."""
    parts = re.split(r"{(\w+)}", template)
    pattern = "".join(
        f"(?P<{part}>{path_pattern(server.op, part).removeprefix('^').removesuffix('$')})"
        if i % 2
        else re.escape(part)
        for i, part in enumerate(parts)
    )
    return re.compile(pattern)
