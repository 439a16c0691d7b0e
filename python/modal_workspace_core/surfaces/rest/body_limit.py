"""ASGI middleware: a request body larger than the bound is refused (413, `limit`) instead of
being held in memory whole. A declared `Content-Length` over it is refused before any byte is
read; a body that grows past it while read fails its read with the same `LimitError`. Routes
whose body is raw bytes streamed to a workspace (uploads) have a bound of their own."""

from __future__ import annotations

import re
from collections.abc import Sequence

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...errors import LimitError
from ...operations.machinery.fields import MAX_FILE_BYTES

# The largest request an operation takes is a file write of 2 * MAX_FILE_BYTES characters
# (base64 of the largest file); JSON may spend up to 6 bytes on a character (`\u0001`). A
# client with more to say is refused before the gateway holds it.
MAX_REQUEST_BYTES = 6 * 2 * MAX_FILE_BYTES + 1024 * 1024


def _route_pattern(path: str) -> re.Pattern[str]:
    """A route template (`/api/workspaces/{workspace_id}/artifacts`) as a full-match pattern."""
    parts = re.split(r"{\w+}", path)
    return re.compile("[^/]+".join(re.escape(part) for part in parts))


class BodyLimit:
    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int = MAX_REQUEST_BYTES,
        raw_routes: Sequence[tuple[str, str]] = (),
        raw_max_bytes: int = MAX_REQUEST_BYTES,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.raw_routes = [(method, _route_pattern(path)) for method, path in raw_routes]
        self.raw_max_bytes = raw_max_bytes

    def _bound(self, scope: Scope) -> int:
        method, path = scope.get("method", ""), scope.get("path", "")
        for raw_method, pattern in self.raw_routes:
            if method == raw_method and pattern.fullmatch(path):
                return self.raw_max_bytes
        return self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        bound = self._bound(scope)
        declared = _content_length(scope)
        if declared is not None and declared > bound:
            await JSONResponse(self._error(bound).to_dict(), status_code=413)(scope, receive, send)
            return
        received = 0

        async def bounded() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > bound:
                    raise self._error(bound)
            return message

        await self.app(scope, bounded, send)

    def _error(self, bound: int) -> LimitError:
        return LimitError(f"the request body is over {bound} bytes")


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses a malformed length itself
    return None
