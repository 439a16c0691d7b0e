"""What the preview proxy changes in the headers it passes (pure functions, no I/O).

The app is served under `<PREVIEW_ROUTE><ticket>/` of its own origin (a host name of the
preview's, `preview_hosts.py`), so what it says about its own paths is moved under that prefix
(`Location`, a cookie's `Path`), what it learns of the browser's location is moved back
(`Origin`, `Referer`: `http://localhost:PORT`, where the app believes it runs), and what could
reach past the link is dropped: a service worker's wider scope (one that outlives its ticket),
an order to clear the site's data (a site is the zone: the gateway's and every preview's), a
cookie's `Domain` (which would send it to them), hop-by-hop headers.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

__all__ = ["app_origin", "cookie", "location", "request_headers", "response_headers"]

Headers = list[tuple[bytes, bytes]]

# Hop-by-hop headers (RFC 9110 §7.6.1) and those the proxy sets itself.
_HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"proxy-connection",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"host",
}
# Never passed to the app: the gateway's own credential (none is needed here, and a browser
# sends none), and what a proxy in front of the gateway said of the client.
_REQUEST_DROPPED = _HOP_BY_HOP | {b"authorization", b"forwarded"}
# Never passed to the browser: a service worker scope wider than the prefix would answer for
# the preview's later links, a live ticket or not; Clear-Site-Data's cookies are the site's
# (the zone's: the gateway's and every preview's), not the app's alone.
_RESPONSE_DROPPED = _HOP_BY_HOP | {b"service-worker-allowed", b"clear-site-data"}
# The ticket is in the page's URL: no request the page makes may carry it to another site.
_RESPONSE_ADDED: Headers = [
    (b"referrer-policy", b"no-referrer"),
    (b"x-robots-tag", b"noindex, nofollow"),
]
_ADDED_NAMES = {name for name, _ in _RESPONSE_ADDED}


def app_origin(port: int) -> bytes:
    """Where the app believes it is served."""
    return f"http://localhost:{port}".encode()


def request_headers(
    headers: Iterable[tuple[bytes, bytes]], port: int, prefix: str, own_host: bytes
) -> Headers:
    """The browser's request headers as the app gets them: `Host`, and `Origin` and `Referer`
    of the preview's own pages (its host name `own_host`), as if the app were opened at
    `http://localhost:PORT`."""
    out: Headers = [(b"host", b"localhost:" + str(port).encode())]
    for name, value in headers:
        lower = name.lower()
        if lower in _REQUEST_DROPPED or lower.startswith(b"x-forwarded-"):
            continue
        if lower == b"origin" and _same_host(value, own_host):
            value = app_origin(port)
        elif lower == b"referer":
            moved = _under_prefix(value, own_host, prefix)
            if moved is None:
                continue  # another site's page: the app has no need of it
            value = app_origin(port) + moved
        out.append((lower, value))
    return out


def response_headers(headers: Iterable[tuple[bytes, bytes]], port: int, prefix: str) -> Headers:
    """The app's response headers as the browser gets them."""
    out: Headers = []
    for name, value in headers:
        lower = name.lower()
        if lower in _RESPONSE_DROPPED or lower in _ADDED_NAMES:
            continue
        if lower == b"location":
            value = location(value, port, prefix)
        elif lower == b"set-cookie":
            value = cookie(value, prefix)
        out.append((lower, value))
    return out + _RESPONSE_ADDED


def location(value: bytes, port: int, prefix: str) -> bytes:
    """A redirect to one of the app's own paths (absolute, or a full URL at the app's origin)
    goes under the prefix; a relative one already does; another site's is left as it is."""
    text = value.decode("latin-1")
    for origin in (f"http://localhost:{port}", f"http://127.0.0.1:{port}"):
        if text == origin or text.startswith(origin + "/"):
            text = text[len(origin) :] or "/"
            break
    if text.startswith("/") and not text.startswith("//"):
        return (prefix + text[1:]).encode("latin-1")
    return text.encode("latin-1")


def cookie(value: bytes, prefix: str) -> bytes:
    """A cookie the app sets, kept to the prefix: its `Path` under it (`/` is the prefix
    itself), no `Domain` (the preview's host name only: a `Domain` would send it to every name
    under it, the gateway's and the other previews')."""
    parts = value.split(b";")
    path = b"/"
    kept = [parts[0]]
    for attribute in parts[1:]:
        name, _, rest = attribute.strip().partition(b"=")
        if name.lower() == b"path":
            path = rest.strip() if rest.strip().startswith(b"/") else b"/"
        elif name.lower() != b"domain":
            kept.append(b" " + attribute.strip())
    kept.append(b" Path=" + prefix.encode("latin-1") + path[1:])
    return b";".join(kept)


def _same_host(origin: bytes, own_host: bytes) -> bool:
    try:
        netloc = urlsplit(origin.decode("latin-1")).netloc
    except ValueError:
        return False
    return netloc.lower().encode("latin-1") == own_host.lower()


def _under_prefix(url: bytes, own_host: bytes, prefix: str) -> bytes | None:
    """The rest of a URL of the preview's own under `prefix` (`/…`), else None."""
    try:
        parts = urlsplit(url.decode("latin-1"))
    except ValueError:
        return None
    if parts.netloc.lower().encode("latin-1") != own_host.lower():
        return None
    if not parts.path.startswith(prefix):
        return None
    rest = "/" + parts.path[len(prefix) :]
    if parts.query:
        rest += "?" + parts.query
    return rest.encode("latin-1")
