"""The gateway as the OAuth 2.1 authorization server of its MCP resource, under uvicorn on
127.0.0.1: discovery, dynamic registration, the operator's consent, PKCE, single-use codes,
rotation, revocation, resource binding and scopes; the official SDK client
(`OAuthClientProvider`) through the whole flow. Against real server processes (the cursor loop,
two gateways on one store): `test_oauth_e2e.py`."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    OAuthClientInformationFull,
)
from modal_workspace_core.config import load_settings
from modal_workspace_core.operations import new_service
from modal_workspace_core.shared_store import SqliteStore
from modal_workspace_core.surfaces.oauth import provider as provider_module
from modal_workspace_core.surfaces.oauth.consent import KEY_TRIES
from modal_workspace_core.surfaces.oauth.provider import GatewayOAuthProvider
from modal_workspace_core.surfaces.oauth.store import (
    UNUSED_CLIENT_SECONDS,
    SharedOAuthStore,
    digest,
)
from modal_workspace_core.surfaces.rest.app import create_app
from pydantic import AnyUrl
from service_support import TOKEN, RecordingDriver, serving
from support.oauth_host import (
    CALLBACK,
    ApprovingBrowser,
    MemoryStorage,
    OAuthHost,
    callback_query,
    pkce,
    sdk_client,
)

METADATA = "/.well-known/oauth-protected-resource/mcp"


def gateway_app(data_root: Path) -> Any:
    settings = load_settings({"MODAL_WORKSPACE_DATA_ROOT": str(data_root)})
    return create_app(new_service(RecordingDriver(), settings), [TOKEN])


@pytest.fixture
async def base(tmp_path: Path) -> AsyncIterator[str]:
    async with serving(gateway_app(tmp_path / "data")) as url:
        yield url


@pytest.fixture
async def http() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(timeout=30) as client:
        yield client


@pytest.fixture
async def host(http: httpx2.AsyncClient, base: str) -> OAuthHost:
    registered = OAuthHost(http, base)
    await registered.register()
    return registered


async def tokens_for(host: OAuthHost, **more: str) -> dict[str, Any]:
    verifier, challenge = pkce()
    code = await host.code(TOKEN, challenge, **more)
    answer = await host.exchange(code, verifier)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


async def workspaces(http: httpx2.AsyncClient, base: str, token: str) -> httpx2.Response:
    return await http.get(f"{base}/api/workspaces", headers={"Authorization": f"Bearer {token}"})


async def test_discovery_documents_name_this_server_and_what_hosts_need(
    http: httpx2.AsyncClient, base: str
) -> None:
    resource = (await http.get(f"{base}{METADATA}")).json()
    assert resource["resource"] == f"{base}/mcp"
    assert resource["authorization_servers"] == [base]
    server = (await http.get(f"{base}/.well-known/oauth-authorization-server")).json()
    assert server["issuer"] == base  # compared as a string: no trailing slash
    assert server["authorization_endpoint"] == f"{base}/authorize"
    assert server["code_challenge_methods_supported"] == ["S256"]
    assert "none" in server["token_endpoint_auth_methods_supported"]
    assert server["authorization_response_iss_parameter_supported"] is True
    # Every 401 of /mcp/ and /api points an OAuth client at the resource's metadata.
    for path in ("/mcp/", "/api/workspaces"):
        refused = await http.post(f"{base}{path}", json={}, headers={"Authorization": "Bearer x"})
        assert refused.status_code == 401
        challenge = refused.headers["www-authenticate"]
        assert f'resource_metadata="{base}{METADATA}"' in challenge, challenge
        assert 'scope="workspace:read workspace:full"' in challenge


async def test_a_token_needs_the_operators_consent(
    http: httpx2.AsyncClient, base: str, host: OAuthHost
) -> None:
    _, challenge = pkce()
    consent = await host.authorize(challenge)
    assert "Test host" in consent.page
    page = await http.get(f"{base}{consent.location}")
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    # A wrong key approves nothing, and the request still waits for the operator.
    wrong = await host.decide(consent, "not-the-key")
    assert wrong.status_code == 403 and "location" not in wrong.headers
    # A forged form (no CSRF value of this page) decides nothing either.
    forged = await http.post(
        f"{base}/oauth/consent",
        data={"request": consent.field("request"), "csrf": "x", "key": TOKEN},
    )
    assert forged.status_code == 403
    refused = await host.decide(consent, "", decision="deny")
    assert refused.status_code == 303
    query = callback_query(refused.headers["location"])
    assert query["error"] == "access_denied" and query["iss"] == base and "code" not in query
    # Decided once: the same request can no longer be approved.
    again = await host.decide(consent, TOKEN)
    assert again.status_code == 404


async def test_a_token_reaches_rest_and_mcp_until_revoked(
    http: httpx2.AsyncClient, base: str, host: OAuthHost
) -> None:
    issued = await tokens_for(host)
    assert issued["token_type"] == "Bearer" and issued["expires_in"] >= 3600
    assert (await workspaces(http, base, issued["access_token"])).status_code == 200
    # The refresh token rotates the grant: the old refresh and access tokens end.
    refreshed = await host.token(grant_type="refresh_token", refresh_token=issued["refresh_token"])
    assert refreshed.status_code == 200, refreshed.text
    fresh = refreshed.json()
    assert (await workspaces(http, base, issued["access_token"])).status_code == 401
    assert (await workspaces(http, base, fresh["access_token"])).status_code == 200
    reused = await host.token(grant_type="refresh_token", refresh_token=issued["refresh_token"])
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    # Revocation holds at the next request.
    revoked = await host.http.post(
        f"{base}/revoke",
        data={
            "token": fresh["access_token"],
            "client_id": host.client["client_id"],
            "client_secret": host.client["client_secret"],
        },
    )
    assert revoked.status_code == 200, revoked.text
    assert (await workspaces(http, base, fresh["access_token"])).status_code == 401
    again = await host.token(grant_type="refresh_token", refresh_token=fresh["refresh_token"])
    assert again.status_code == 400


async def test_pkce_single_use_codes_and_exact_redirects(
    http: httpx2.AsyncClient, base: str, host: OAuthHost
) -> None:
    verifier, challenge = pkce()
    code = await host.code(TOKEN, challenge)
    wrong = await host.exchange(code, pkce()[0])
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
    first = await host.exchange(code, verifier)
    assert first.status_code == 200, first.text
    # A code seen again is refused, and the tokens it gave end with it (it may be a replay).
    second = await host.exchange(code, verifier)
    assert second.status_code == 400 and second.json()["error"] == "invalid_grant"
    assert (await workspaces(http, base, first.json()["access_token"])).status_code == 401
    # A redirect the client did not register is refused at /authorize, before any consent.
    params = host.authorization(challenge, redirect_uri="https://attacker.example/callback")
    elsewhere = await http.get(f"{base}/authorize", params=params)
    assert elsewhere.status_code == 400, elsewhere.text
    assert "location" not in elsewhere.headers


async def test_tokens_are_bound_to_this_servers_resource(
    http: httpx2.AsyncClient, base: str, host: OAuthHost
) -> None:
    _, challenge = pkce()
    params = host.authorization(challenge, resource="https://another.example/mcp")
    other = await http.get(f"{base}/authorize", params=params)
    assert other.status_code == 302
    assert callback_query(other.headers["location"])["error"] == "invalid_target"
    issued = await tokens_for(host)
    # The same server reached by another name is another resource: its tokens are not these.
    port = base.rsplit(":", 1)[1]
    elsewhere = await http.get(
        f"{base}/api/workspaces",
        headers={"Authorization": f"Bearer {issued['access_token']}", "Host": f"localhost:{port}"},
    )
    assert elsewhere.status_code == 401


async def test_a_read_only_token_reads_and_is_refused_what_changes(
    http: httpx2.AsyncClient, base: str, host: OAuthHost
) -> None:
    issued = await tokens_for(host, scope="workspace:read")
    assert issued["scope"] == "workspace:read"
    auth = {"Authorization": f"Bearer {issued['access_token']}"}
    assert (await http.get(f"{base}/api/workspaces", headers=auth)).status_code == 200
    # REST's byte routes run the operation without `run`: the scope holds there too, before
    # anything of the upload is read.
    ws = "ws-" + "0" * 32
    upload = await http.put(
        f"{base}/api/workspaces/{ws}/artifacts",
        params={"path": "/workspace/x"},
        content=b"bytes",
        headers={**auth, "Content-Type": "application/octet-stream"},
    )
    assert upload.status_code == 403, upload.text
    assert upload.json()["error"]["code"] == "insufficient_scope"
    created = await http.post(f"{base}/api/workspaces", json={}, headers=auth)
    assert created.status_code == 403, created.text
    error = created.json()["error"]
    assert error["code"] == "insufficient_scope" and "workspace_create" in error["message"]
    mcp = Client(
        streamable_http_client(f"{base}/mcp/", http_client=httpx2.AsyncClient(headers=auth)),
        mode="legacy",
    )
    async with mcp as client:
        assert not (await client.call_tool("workspace_list", {})).is_error
        refused = await client.call_tool("workspace_create", {})
    assert refused.is_error
    text = refused.content[0].text  # type: ignore[union-attr]
    assert json.loads(text)["error"]["code"] == "insufficient_scope"


async def test_the_sdk_client_registers_is_approved_and_uses_the_tools(
    http: httpx2.AsyncClient, base: str
) -> None:
    """The flow as the official SDK's client runs it: discovery from the 401, dynamic
    registration, the browser sent to /authorize (here: the operator approves at the consent
    page), the callback's code and `iss` checked, the token exchange, then MCP."""
    browser = ApprovingBrowser(http, base, TOKEN)
    storage = MemoryStorage()
    async with sdk_client(browser, storage, "SDK host") as client:
        tools = (await client.list_tools()).tools
        assert any(t.name == "workspace_create" for t in tools)
        assert not (await client.call_tool("workspace_list", {})).is_error
    assert storage.tokens is not None and storage.client is not None
    assert browser.received["iss"] == base


async def test_an_access_token_ends_at_its_expiry(tmp_path: Path) -> None:
    now = [1_000_000.0]
    store = SharedOAuthStore(SqliteStore(tmp_path / "shared.sqlite3"), clock=lambda: now[0])
    provider = GatewayOAuthProvider(store, token_seconds=3600, clock=lambda: now[0])
    issued = await provider._issue("grant", "client", ["workspace:full"], "http://x/mcp")
    assert await provider.load_access_token(issued.access_token) is not None
    now[0] += 3601
    assert await provider.load_access_token(issued.access_token) is None
    assert issued.refresh_token is not None
    client = OAuthClientInformationFull(client_id="client", redirect_uris=[AnyUrl(CALLBACK)])
    assert await provider.load_refresh_token(client, issued.refresh_token) is not None


async def test_registration_and_waiting_consents_are_bounded(
    http: httpx2.AsyncClient, base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(provider_module, "REGISTRATIONS_PER_MINUTE", 2)
    monkeypatch.setattr(provider_module, "MAX_PENDING", 1)
    host = OAuthHost(http, base)
    await host.register()
    await OAuthHost(http, base).register()
    third = await http.post(f"{base}/register", json={"redirect_uris": [CALLBACK]})
    assert third.status_code == 400 and "too many" in third.text
    _, challenge = pkce()
    await host.authorize(challenge)
    waiting = await http.get(f"{base}/authorize", params=host.authorization(challenge))
    assert callback_query(waiting.headers["location"])["error"] == "temporarily_unavailable"


async def test_a_request_ends_after_a_few_wrong_keys(host: OAuthHost) -> None:
    _, challenge = pkce()
    consent = await host.authorize(challenge)
    for _ in range(KEY_TRIES - 1):
        assert (await host.decide(consent, "guess")).status_code == 403
    last = await host.decide(consent, "guess")
    assert last.status_code == 403 and "too many times" in last.text
    # The right key comes too late: guessing costs a new authorization every few tries.
    assert (await host.decide(consent, TOKEN)).status_code == 404


async def test_clients_that_never_hold_a_token_are_forgotten(tmp_path: Path) -> None:
    now = [1_000_000.0]
    store = SharedOAuthStore(SqliteStore(tmp_path / "shared.sqlite3"), clock=lambda: now[0])
    provider = GatewayOAuthProvider(store, token_seconds=3600, clock=lambda: now[0])
    await store.put_client("idle", "{}")
    await store.put_client("used", "{}")
    await provider._issue("grant", "used", ["workspace:full"], "http://x/mcp")
    now[0] += UNUSED_CLIENT_SECONDS + 1
    await store.put_client("new", "{}")
    assert await store.get_client("idle") is None
    assert await store.get_client("used") == "{}" and await store.get_client("new") == "{}"


async def test_expired_codes_and_tokens_leave_the_store(tmp_path: Path) -> None:
    now = [1_000_000.0]
    shared = SqliteStore(tmp_path / "shared.sqlite3")
    store = SharedOAuthStore(shared, clock=lambda: now[0])
    provider = GatewayOAuthProvider(store, token_seconds=3600, clock=lambda: now[0])
    await store.put_code("code", "grant", {"x": 1}, now[0] + 300)
    issued = await provider._issue("grant", "client", ["workspace:full"], "http://x/mcp")
    assert len(await shared.names("oauth/tokens")) == 2
    # Past the refresh token's year, the next write clears both tokens and the code.
    now[0] += 366 * 24 * 3600
    await provider._issue("later", "client", ["workspace:full"], "http://x/mcp")
    assert await provider.load_access_token(issued.access_token) is None
    assert len(await shared.names("oauth/tokens")) == 2  # the later grant's two
    assert await shared.names("oauth/codes") == []
    assert await shared.names("oauth/grants") == [digest("later")]


async def test_a_consent_and_a_code_are_used_once_by_racing_callers(tmp_path: Path) -> None:
    store = SharedOAuthStore(SqliteStore(tmp_path / "shared.sqlite3"))
    await store.put_pending("request", {"r": 1}, time.time() + 60)
    taken = await asyncio.gather(*(store.take_pending("request") for _ in range(8)))
    assert taken.count({"r": 1}) == 1 and taken.count(None) == 7
    await store.put_code("code", "grant", {"c": 1}, time.time() + 60)
    used = await asyncio.gather(*(store.use_code("code") for _ in range(8)))
    # One exchange gets the grant; the others are replays, which end it.
    assert used.count("grant") == 1 and used.count(None) == 7


@pytest.mark.parametrize(
    "bad", [{"code_challenge_method": "plain"}, {"scope": "workspace:everything"}]
)
async def test_an_authorization_refused_by_redirect_names_the_issuer(
    http: httpx2.AsyncClient, base: str, bad: dict[str, str]
) -> None:
    """RFC 9207: errors sent back to the client carry `iss` like answers do, and state."""
    host = OAuthHost(http, base)
    await host.register()
    _, challenge = pkce()
    params = host.authorization(challenge, **bad)
    refused = await http.get(f"{base}/authorize", params=params)
    assert refused.status_code == 302, refused.text
    query = callback_query(refused.headers["location"])
    assert query["error"] and query["state"] == "state-123", query
    assert query["iss"] == base
