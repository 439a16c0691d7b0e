"""Proxy headers, trusted only from the proxies the operator names: from them `X-Forwarded-For`
and `X-Forwarded-Proto` say who the client is and how it came (uvicorn's own middleware applies
them), and `X-Forwarded-Host` what name it used; from anyone else every `X-Forwarded-*` and
`Forwarded` header is removed before the app sees the request, so nothing downstream can be
told a scheme, a host or an address by the client itself."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

__all__ = ["TrustedProxyHeaders"]


class TrustedProxyHeaders:
    def __init__(self, app: ASGIApp, trusted: Sequence[str]) -> None:
        self.app = app
        self._trusting = ProxyHeadersMiddleware(app, trusted_hosts=list(trusted))  # type: ignore[arg-type]
        self._trusted = self._trusting.trusted_hosts if trusted else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        if self._trusted is not None and client and client[0] in self._trusted:
            await self._trusting(scope, receive, send)  # type: ignore[arg-type]
            return
        scope["headers"] = [
            (name, value)
            for name, value in scope.get("headers", ())
            if not _forwarding(name.lower())
        ]
        await self.app(scope, receive, send)


def _forwarding(name: bytes) -> bool:
    return name.startswith(b"x-forwarded-") or name == b"forwarded"
