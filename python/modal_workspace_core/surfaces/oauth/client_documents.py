"""Client ID Metadata Documents: a client whose id is an https URL describes itself in the JSON
document at that URL (Claude's hosts register this way when the server offers it). The MCP SDK
has no server side for it, so the gateway fetches the document itself, and the fetch is a
request the gateway makes to an address a stranger chose:

- https only, to a URL with a path (the SDK client's own rule for such ids);
- to public addresses only: the name is resolved here, every address it resolves to must be
  global (no loopback, private, link-local, shared or reserved range, IPv4-mapped ones
  included), and the connection goes to the address that was checked, so a second answer of the
  DNS cannot swap in another (TLS still verifies the name);
- no redirect followed (httpcore follows none), at most `DOCUMENT_BYTES`, within
  `DEADLINE_SECONDS`;
- the document must name itself (`client_id` is its URL), be a public client (no secret can be
  shared with a document) and redirect only to https or a loopback http address;
- kept for `CACHE_SECONDS` (a refusal for less), a bounded number of them.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

import httpcore2
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata
from pydantic import ValidationError

from ...runtime.call import FULL_SCOPE, READ_SCOPE

__all__ = [
    "CACHE_SECONDS",
    "DOCUMENT_BYTES",
    "ClientDocuments",
    "DocumentRefused",
    "PublicOnlyBackend",
    "is_document_id",
    "is_public",
]

DOCUMENT_BYTES = 5 * 1024
DEADLINE_SECONDS = 5.0
CACHE_SECONDS = 600
REFUSAL_CACHE_SECONDS = 60
CACHED_DOCUMENTS = 256

Resolve = Callable[[str, int], Awaitable[list[str]]]
# What a fetch that could not be made raises (a refusal of the backend's among them).
_FETCH_ERRORS = (
    httpcore2.NetworkError,
    httpcore2.ProtocolError,
    httpcore2.TimeoutException,
    ssl.SSLError,
    OSError,
    ValueError,
)


class DocumentRefused(Exception):
    """Why a client's metadata document was not taken."""


def is_document_id(client_id: str) -> bool:
    """An https URL with a path beyond `/`, no credentials, no fragment."""
    try:
        url = urlsplit(client_id)
        url.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        return False
    return (
        url.scheme == "https"
        and bool(url.hostname)
        and url.path not in ("", "/")
        and not url.fragment
        and url.username is None
        and url.password is None
    )


def is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def resolve_host(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


class PublicOnlyBackend(httpcore2.AsyncNetworkBackend):
    """httpcore's network backend, connecting only to a public address it resolved and checked
    itself."""

    def __init__(
        self,
        inner: httpcore2.AsyncNetworkBackend | None = None,
        resolve: Resolve = resolve_host,
        allowed: Callable[[str], bool] = is_public,
    ) -> None:
        self.inner = inner or httpcore2.AnyIOBackend()
        self.resolve = resolve
        self.allowed = allowed

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            addresses = await self.resolve(host, port)
        except OSError as exc:
            raise httpcore2.ConnectError(f"{host} does not resolve: {exc}") from None
        if not addresses or not all(self.allowed(a) for a in addresses):
            raise httpcore2.ConnectError(f"{host} resolves to an address that is not public")
        return await self.inner.connect_tcp(
            addresses[0],
            port,
            timeout=timeout,
            local_address=local_address,
            socket_options=socket_options,
        )

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class ClientDocuments:
    """The clients whose ids are URLs, fetched and cached."""

    def __init__(
        self,
        backend: httpcore2.AsyncNetworkBackend | None = None,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend or PublicOnlyBackend()
        self.ssl_context = ssl_context or ssl.create_default_context()
        self.clock = clock
        self._cache: OrderedDict[str, tuple[float, OAuthClientInformationFull | None]] = (
            OrderedDict()
        )

    async def client(self, url: str) -> OAuthClientInformationFull | None:
        """The client the document at `url` describes; None when it is refused."""
        held = self._cache.get(url)
        if held is not None and held[0] > self.clock():
            return held[1]
        try:
            client: OAuthClientInformationFull | None = await self.fetch(url)
            lifetime = CACHE_SECONDS
        except DocumentRefused:
            client, lifetime = None, REFUSAL_CACHE_SECONDS
        self._cache[url] = (self.clock() + lifetime, client)
        self._cache.move_to_end(url)
        while len(self._cache) > CACHED_DOCUMENTS:
            self._cache.popitem(last=False)
        return client

    async def fetch(self, url: str) -> OAuthClientInformationFull:
        if not is_document_id(url):
            raise DocumentRefused("a client id document is at an https URL with a path")
        try:
            async with asyncio.timeout(DEADLINE_SECONDS):
                body = await self._get(url)
        except TimeoutError:
            raise DocumentRefused(f"no document within {DEADLINE_SECONDS:g} s") from None
        except _FETCH_ERRORS as exc:
            raise DocumentRefused(f"could not fetch the document: {exc}") from None
        return _client_of(url, body)

    async def _get(self, url: str) -> bytes:
        async with httpcore2.AsyncConnectionPool(
            ssl_context=self.ssl_context, network_backend=self.backend, max_connections=1
        ) as pool:
            headers = [(b"Accept", b"application/json"), (b"User-Agent", b"modal-workspace")]
            async with pool.stream("GET", url, headers=headers) as response:
                if response.status != 200:
                    # A redirect among them: never followed.
                    raise DocumentRefused(f"the document's URL answered {response.status}")
                body = b""
                async for chunk in response.aiter_stream():
                    body += chunk
                    if len(body) > DOCUMENT_BYTES:
                        raise DocumentRefused(f"the document is over {DOCUMENT_BYTES} bytes")
                return body


def _client_of(url: str, body: bytes) -> OAuthClientInformationFull:
    try:
        document = json.loads(body)
    except ValueError:
        raise DocumentRefused("the document is not JSON") from None
    if not isinstance(document, dict) or document.get("client_id") != url:
        raise DocumentRefused("the document does not name itself as its client_id")
    method = document.get("token_endpoint_auth_method", "none")
    if method != "none" or "client_secret" in document:
        raise DocumentRefused("a client described by a document is public: no secret")
    try:
        metadata = OAuthClientMetadata.model_validate(
            {k: v for k, v in document.items() if k != "client_id"}
            | {"token_endpoint_auth_method": "none"}
        )
    except ValidationError as exc:
        raise DocumentRefused(f"the document is not client metadata: {exc.errors()[:1]}") from None
    if not metadata.redirect_uris:
        raise DocumentRefused("the document names no redirect_uris")
    if "authorization_code" not in metadata.grant_types:
        raise DocumentRefused("the document's grant_types lack authorization_code")
    # A document that names no scope may ask for any (the operator's consent decides).
    scope = metadata.scope or f"{READ_SCOPE} {FULL_SCOPE}"
    return OAuthClientInformationFull.model_validate(
        metadata.model_dump() | {"client_id": url, "scope": scope}
    )
