"""ASGI middleware: `/api/*` and `/mcp/*` take no WebSocket and need `Authorization: Bearer
<token>`, one of the operator's static keys or an access token the gateway's OAuth server issued
for this server's `/mcp` (`surfaces/oauth`). A missing, malformed, non-ASCII, unknown, expired
or revoked token, or a second header, is a 401 — never a 500 — whose `WWW-Authenticate` points
OAuth clients at the resource's metadata (RFC 9728), with the scopes.

A static key grants everything; an OAuth token its scopes, which the operations check
(`GRANT`, read by `operations/machinery/run.py`). The static keys are compared first, in
constant time: a static-key request never touches the OAuth store.
"""

from __future__ import annotations

from collections.abc import Sequence

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ...errors import UnauthenticatedError
from ...runtime.call import GRANT, LINK_BASE
from ..keys import bearer_value, key_matches
from ..oauth.metadata import can_issue, resource_metadata_url
from ..oauth.provider import SCOPES, GatewayOAuthProvider, same_resource

__all__ = ["PROTECTED_PREFIXES", "BearerAuth"]

PROTECTED_PREFIXES = ("/api", "/mcp")


class BearerAuth:
    def __init__(
        self,
        app: ASGIApp,
        tokens: Sequence[str],
        oauth: GatewayOAuthProvider | None = None,
    ) -> None:
        if not tokens:
            raise ValueError("BearerAuth needs at least one token")
        self.app = app
        self.tokens = [t.encode("ascii") for t in tokens]
        self.oauth = oauth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and _protected(scope.get("path", "")):
            # No operation is served over a WebSocket: a handshake there is refused (403)
            # before it reaches the API or MCP, which take HTTP alone.
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http" or not _protected(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        values = [v for k, v in scope.get("headers", []) if k.lower() == b"authorization"]
        presented = bearer_value(values[0]) if len(values) == 1 else None
        if presented is not None and key_matches(presented, self.tokens):
            await self.app(scope, receive, send)
            return
        granted = await self._oauth_scopes(presented)
        if granted is None:
            await self._refuse(scope, receive, send, presented is not None)
            return
        token = GRANT.set(granted)
        try:
            await self.app(scope, receive, send)
        finally:
            GRANT.reset(token)

    async def _oauth_scopes(self, presented: bytes | None) -> frozenset[str] | None:
        """The scopes of a live OAuth access token issued for this server's `/mcp`."""
        if presented is None or self.oauth is None:
            return None
        access = await self.oauth.load_access_token(presented.decode("ascii"))
        base = LINK_BASE.get() or ""
        if access is None or not same_resource(access.resource, base):
            return None
        return frozenset(access.scopes)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, invalid: bool) -> None:
        err = UnauthenticatedError(
            "missing or invalid bearer token: send 'Authorization: Bearer <token>'"
        )
        challenge = "Bearer"
        base = LINK_BASE.get()
        if self.oauth is not None and base is not None and can_issue(base):
            parts = [f'resource_metadata="{resource_metadata_url(base)}"']
            parts.append(f'scope="{" ".join(SCOPES)}"')
            if invalid:
                parts.insert(0, 'error="invalid_token"')
            challenge = "Bearer " + ", ".join(parts)
        response = JSONResponse(
            err.to_dict(), status_code=err.status, headers={"WWW-Authenticate": challenge}
        )
        await response(scope, receive, send)


def _protected(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in PROTECTED_PREFIXES)
