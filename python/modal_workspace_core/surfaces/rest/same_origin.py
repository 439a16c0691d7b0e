"""Whether a WebSocket handshake comes from a page of this gateway: its `Origin` must be the
gateway's own origin, the base its links are minted under (`LINK_BASE`: the settings' public
URL when set, else the scheme and host the request reached it by). Browsers do not apply the
same-origin policy to WebSockets, so without this check any site a person visits could open
a socket to the gateway from their browser; the server is the only place it can be refused.
"""

from __future__ import annotations

import urllib.parse

from starlette.types import Scope

from ...runtime.call import LINK_BASE

__all__ = ["origin_of", "same_origin"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str) -> str | None:
    """`scheme://host[:port]` of an http(s) URL, lowercased, the default port left out; None
    for anything else (`null`, another scheme, userinfo, a port that is not one)."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.username is not None:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    return (
        f"{scheme}://{host}"
        if port in (None, _DEFAULT_PORTS[scheme])
        else f"{scheme}://{host}:{port}"
    )


def same_origin(scope: Scope) -> bool:
    """The handshake in `scope` names exactly one `Origin`, and it is the gateway's own."""
    presented = [v for k, v in scope.get("headers", ()) if k.lower() == b"origin"]
    base = LINK_BASE.get()
    if len(presented) != 1 or base is None:
        return False
    mine = origin_of(base)
    return mine is not None and origin_of(presented[0].decode("latin-1")) == mine
