"""Bearer auth: `/api/*` and `/mcp/` need a configured token, compared in constant time; every
bad header is a 401 in the error shape (never a 500); `/healthz` and the Actions schema are open."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
from fastapi import FastAPI
from modal_workspace_core.config import ConfigError, load_settings
from modal_workspace_core.operations import new_service
from modal_workspace_core.surfaces import keys
from modal_workspace_core.surfaces.rest.app import create_app, token_matches
from service_support import OTHER_TOKEN, TOKEN, RecordingDriver


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return create_app(new_service(RecordingDriver(), load_settings({})), [TOKEN, OTHER_TOKEN])


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
        yield c


def _raw_get(path: str, headers: list[tuple[bytes, bytes]]) -> httpx2.Request:
    return httpx2.Request("GET", f"http://127.0.0.1{path}", headers=headers)


async def test_a_request_without_a_token_is_401_in_the_error_shape(
    client: httpx2.AsyncClient,
) -> None:
    response = await client.get("/api/workspaces")
    assert response.status_code == 401
    # OAuth clients learn where to find the authorization server from it (RFC 9728).
    challenge = response.headers["www-authenticate"]
    metadata = "http://127.0.0.1/.well-known/oauth-protected-resource/mcp"
    assert challenge.startswith("Bearer ") and f'resource_metadata="{metadata}"' in challenge
    error = response.json()["error"]
    assert error["code"] == "unauthenticated"
    assert "Bearer" in error["message"]


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"Bearer",
        b"Bearer ",
        b"Basic " + TOKEN.encode(),
        b"bearer-" + TOKEN.encode(),
        TOKEN.encode(),
        b"Bearer " + TOKEN.encode() + b"x",
        b"Bearer " + TOKEN[:-1].encode(),
        b"Bearer wrong-token-0000000000",
        b"Bearer \xc3\xa9" + TOKEN.encode(),
        b"Bearer " + TOKEN.encode() + b"\xff",
        b"Bearer \x00" + TOKEN.encode(),
    ],
)
async def test_malformed_non_ascii_and_wrong_tokens_are_401(
    client: httpx2.AsyncClient, value: bytes
) -> None:
    for path in ("/api/workspaces", "/mcp/", "/mcp"):
        response = await client.send(_raw_get(path, [(b"authorization", value)]))
        assert response.status_code == 401, (path, value)
        assert response.json()["error"]["code"] == "unauthenticated"


async def test_two_authorization_headers_are_401_even_if_one_is_right(
    client: httpx2.AsyncClient,
) -> None:
    headers = [(b"authorization", b"Bearer " + TOKEN.encode()), (b"authorization", b"Bearer x")]
    response = await client.send(_raw_get("/api/workspaces", headers))
    assert response.status_code == 401


async def test_each_configured_token_is_accepted(client: httpx2.AsyncClient) -> None:
    for token in (TOKEN, OTHER_TOKEN):
        response = await client.get("/api/workspaces", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200
        assert response.json() == {"workspaces": [], "truncated": False}
    lowercase = await client.get("/api/workspaces", headers={"Authorization": f"bearer {TOKEN}"})
    assert lowercase.status_code == 200


async def test_health_and_the_actions_schema_need_no_token(client: httpx2.AsyncClient) -> None:
    health = await client.get("/healthz")
    assert health.status_code == 200
    assert health.json()["ok"] is True
    schema = await client.get("/action-openapi.json")
    assert schema.status_code == 200
    assert schema.json()["openapi"].startswith("3.")


async def test_the_full_schema_is_behind_no_secret_but_lists_the_bearer_scheme(
    client: httpx2.AsyncClient,
) -> None:
    schema = (await client.get("/openapi.json")).json()
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"


def test_tokens_are_compared_with_compare_digest_against_every_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def recording(a: bytes, b: bytes) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(keys.hmac, "compare_digest", recording)
    tokens = [b"first-token-000", b"second-token-00", b"third-token-000"]
    assert token_matches(b"Bearer first-token-000", tokens)
    # No early exit: the time taken does not say which token matched.
    assert [a for a, _ in seen] == tokens
    seen.clear()
    assert not token_matches(b"Bearer nope-nope-nope", tokens)
    assert len(seen) == 3


def test_an_app_without_tokens_cannot_be_built() -> None:
    with pytest.raises(ValueError, match="token"):
        create_app(new_service(RecordingDriver(), load_settings({})), [])


def test_tokens_come_from_the_variable_comma_separated_and_from_a_file(tmp_path: Path) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text("file-token-1234567\n\nfile-token-7654321\n")
    settings = load_settings(
        {
            "MODAL_WORKSPACE_MCP_TOKEN": f"{TOKEN}, {OTHER_TOKEN}",
            "MODAL_WORKSPACE_MCP_TOKEN_FILE": str(token_file),
        }
    )
    assert settings.tokens == (TOKEN, OTHER_TOKEN, "file-token-1234567", "file-token-7654321")
    assert settings.token_source == f"MODAL_WORKSPACE_MCP_TOKEN and {token_file}"
    # The settings' repr never shows a token.
    assert TOKEN not in repr(settings) and TOKEN not in str(settings)


@pytest.mark.parametrize("bad", ["short", "has space-in-it", "nön-ascii-token"])
def test_weak_or_unusable_tokens_stop_the_start(bad: str) -> None:
    with pytest.raises(ConfigError, match="MODAL_WORKSPACE_MCP_TOKEN"):
        load_settings({"MODAL_WORKSPACE_MCP_TOKEN": bad})


def test_an_unreadable_token_file_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="MODAL_WORKSPACE_MCP_TOKEN_FILE"):
        load_settings({"MODAL_WORKSPACE_MCP_TOKEN_FILE": str(tmp_path / "missing")})
