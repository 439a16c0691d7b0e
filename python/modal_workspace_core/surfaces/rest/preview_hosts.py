"""ASGI middleware: which application a request reaches, by the host name it names.

Previews are served on host names of their own (`p-<id>-<port>.<zone>`:
`policy.preview_origin_host`), so that a workspace's app, whose scripts are workspace output,
shares an origin with no page of the gateway's and with no other preview: the browser's
same-origin policy then keeps it from reading them. That holds only if the two never meet, so:

- a request whose host is a preview's name reaches the preview routes alone (HTTP and WebSocket),
  carrying the workspace and port its name stands for (`PREVIEW_HOST_KEY`), which the ticket it
  presents must match;
- any other name under the zone reaches nothing (404);
- every other request reaches the gateway's own application, which has no preview route.

The host is the one the client used: `X-Forwarded-Host` where a trusted proxy sent it (the
headers of anyone else are gone by now, `TrustedProxyHeaders`), else `Host`.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from ... import policy
from ...errors import NotFoundError, WorkspaceError, core_refusal

__all__ = ["PREVIEW_HOST_KEY", "PreviewHost", "PreviewHosts", "request_host"]

# Where the scope carries what the preview's host name stands for.
PREVIEW_HOST_KEY = "modal_workspace.preview_host"


@dataclass(frozen=True)
class PreviewHost:
    """The workspace and port a preview's host name stands for, and that name as the client
    sent it (`name[:port]`)."""

    workspace_id: str
    port: int
    host: str


class PreviewHosts:
    def __init__(self, app: ASGIApp, previews: ASGIApp, refused: ASGIApp, zone: str | None):
        self.app = app
        self.previews = previews
        self.refused = refused
        self.zone = zone

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.zone is None or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = request_host(scope)
        try:
            with core_refusal(None, error=lambda message, _: NotFoundError(message)):
                named = policy.preview_host_target(host, self.zone)
        except WorkspaceError:
            await self.refused(scope, receive, send)
            return
        if named is None:
            await self.app(scope, receive, send)
            return
        scope[PREVIEW_HOST_KEY] = PreviewHost(named[0], named[1], host)
        await self.previews(scope, receive, send)


def request_host(scope: Scope) -> str:
    """The host (`name[:port]`) the client reached the gateway by."""
    forwarded = named = None
    for name, value in scope.get("headers", ()):
        name = name.lower()
        if name == b"x-forwarded-host" and forwarded is None:
            forwarded = value.decode("latin-1")
        elif name == b"host" and named is None:
            named = value.decode("latin-1")
    return (forwarded or named or "").split(",")[0].strip()
