"""RFC 9207 on the SDK's authorization endpoint: every authorization response names its issuer
(`iss`), error redirects too. The server's metadata says so
(`authorization_response_iss_parameter_supported`), and a client that relies on it (ChatGPT's
shared callback) refuses a response without one; the SDK's handler adds none to the errors it
redirects with, so this wraps it and adds the issuer: the base the request reached, as the
metadata document names it."""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...runtime.call import LINK_BASE

__all__ = ["WithIssuer"]


class WithIssuer:
    """The authorization endpoint `app`, its error redirects given `iss`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        issuer = LINK_BASE.get() or ""

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and issuer:
                message["headers"] = [
                    (name, _with_issuer(value, issuer) if name.lower() == b"location" else value)
                    for name, value in message.get("headers", [])
                ]
            await send(message)

        await self.app(scope, receive, sending)


def _with_issuer(location: bytes, issuer: str) -> bytes:
    url = urlsplit(location.decode("latin-1"))
    query = parse_qs(url.query, keep_blank_values=True)
    if "error" not in query or "iss" in query:
        return location  # not an error sent to the client (the consent page), or already named
    named = f"{url.query}&{urlencode({'iss': issuer})}" if url.query else urlencode({"iss": issuer})
    return urlunsplit(url._replace(query=named)).encode("latin-1")
