"""Client ID Metadata Documents: a client whose id is an https URL, fetched by the gateway under
SSRF guards. The network is stood in for by httpcore's mock backend behind the real
`PublicOnlyBackend` (which resolves, checks and pins the address), with a resolver the test
chooses; the SDK client then runs the whole flow with such an id against the app."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import httpcore2
import httpx2
import pytest
from modal_workspace_core.config import load_settings
from modal_workspace_core.operations import new_service
from modal_workspace_core.surfaces.oauth.client_documents import (
    DOCUMENT_BYTES,
    ClientDocuments,
    PublicOnlyBackend,
    is_document_id,
    is_public,
)
from modal_workspace_core.surfaces.rest.app import create_app
from service_support import TOKEN, RecordingDriver, serving
from support.oauth_host import CALLBACK, ApprovingBrowser, MemoryStorage, sdk_client

URL = "https://client.example/oauth/client.json"
PUBLIC = "93.184.216.34"


def document(**changes: Any) -> dict[str, Any]:
    return {
        "client_id": URL,
        "client_name": "Document host",
        "redirect_uris": [CALLBACK],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        **changes,
    }


def answer(body: bytes, status: str = "200 OK", headers: str = "") -> list[bytes]:
    head = f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{headers}\r\n"
    return [head.encode(), body]


class RecordingBackend(httpcore2.AsyncMockBackend):
    """The mock network, saying where it was asked to connect."""

    def __init__(self, buffer: list[bytes]) -> None:
        super().__init__(buffer)
        self.connected: list[tuple[str, int]] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        self.connected.append((host, port))
        return await super().connect_tcp(host, port, timeout, local_address, socket_options)


def documents_at(address: str, buffer: list[bytes]) -> tuple[ClientDocuments, RecordingBackend]:
    network = RecordingBackend(buffer)

    async def resolve(host: str, port: int) -> list[str]:
        return [address]

    return ClientDocuments(backend=PublicOnlyBackend(network, resolve=resolve)), network


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "::1",
        "fd00::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
    ],
)
def test_only_public_addresses_are_public(address: str) -> None:
    assert not is_public(address)


def test_public_addresses_are() -> None:
    assert is_public(PUBLIC) and is_public("2606:4700:4700::1111")


def test_a_document_id_is_an_https_url_with_a_path() -> None:
    assert is_document_id(URL)
    for other in (
        "https://client.example",
        "https://client.example/",
        "http://client.example/client.json",
        "https://user:pw@client.example/client.json",
        "https://client.example/client.json#x",
        "https://client.example:99999/client.json",
        "f9c1e2a0-uuid-like",
    ):
        assert not is_document_id(other), other


@pytest.mark.parametrize("address", ["127.0.0.1", "10.0.0.5", "169.254.169.254", "::1"])
async def test_a_document_on_a_private_address_is_refused_without_a_connection(
    address: str,
) -> None:
    documents, network = documents_at(address, answer(json.dumps(document()).encode()))
    assert await documents.client(URL) is None
    assert network.connected == []


async def test_a_name_that_resolves_to_loopback_is_refused_by_the_real_resolver() -> None:
    network = RecordingBackend(answer(json.dumps(document()).encode()))
    documents = ClientDocuments(backend=PublicOnlyBackend(network))
    assert await documents.client("https://localhost/oauth/client.json") is None
    assert network.connected == []


async def test_a_public_document_is_fetched_from_the_address_that_was_checked() -> None:
    documents, network = documents_at(PUBLIC, answer(json.dumps(document()).encode()))
    client = await documents.client(URL)
    assert client is not None
    assert client.client_id == URL and client.client_name == "Document host"
    assert client.token_endpoint_auth_method == "none" and client.client_secret is None
    assert network.connected == [(PUBLIC, 443)]
    # Kept: asked again, it is not fetched again.
    assert await documents.client(URL) is not None
    assert len(network.connected) == 1


@pytest.mark.parametrize(
    "buffer",
    [
        answer(b"", "302 Found", f"Location: https://{PUBLIC}/elsewhere.json\r\n"),
        answer(b"{}", "404 Not Found"),
        answer(b"not json"),
        answer(json.dumps(document(client_id="https://other.example/c.json")).encode()),
        answer(json.dumps(document(token_endpoint_auth_method="client_secret_post")).encode()),
        answer(json.dumps(document(redirect_uris=[])).encode()),
        answer(json.dumps(document(grant_types=["refresh_token"])).encode()),
        answer(json.dumps(document(padding="x" * DOCUMENT_BYTES)).encode()),
    ],
    ids=["redirect", "404", "not-json", "other-id", "secret", "no-redirect", "no-code", "big"],
)
async def test_what_is_not_a_public_clients_own_document_is_refused(buffer: list[bytes]) -> None:
    documents, _ = documents_at(PUBLIC, buffer)
    assert await documents.client(URL) is None


@pytest.fixture
async def base(tmp_path: Path) -> AsyncIterator[str]:
    documents, _ = documents_at(PUBLIC, answer(json.dumps(document()).encode()))
    settings = load_settings({"MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "data")})
    app = create_app(new_service(RecordingDriver(), settings), [TOKEN], client_documents=documents)
    async with serving(app) as url:
        yield url


async def test_the_sdk_client_connects_with_a_client_id_metadata_document(base: str) -> None:
    async with httpx2.AsyncClient(timeout=30) as http:
        server = (await http.get(f"{base}/.well-known/oauth-authorization-server")).json()
        assert server["client_id_metadata_document_supported"] is True
        browser = ApprovingBrowser(http, base, TOKEN)
        storage = MemoryStorage()
        async with sdk_client(browser, storage, "Document host", client_metadata_url=URL) as c:
            assert not (await c.call_tool("workspace_list", {})).is_error
        # No registration: the client's id is its document's URL, and the page names it.
        assert storage.client is not None and storage.client.client_id == URL
        assert "Document host" in browser.page
