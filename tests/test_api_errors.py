"""Hostile and malformed input through the REST API: a 4xx in the error shape with a message
that names the field, and nothing reaches the driver (so nothing is created or run)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI
from modal_workspace_core import _core, policy
from modal_workspace_core.config import ConfigError, load_settings, setting_error
from modal_workspace_core.errors import InvalidArgumentError, PermissionDeniedError, core_refusal
from modal_workspace_core.operations import new_service
from modal_workspace_core.surfaces.rest.app import create_app
from service_support import TOKEN, RecordingDriver

WS = "ws-" + "0" * 32
EX = "ex-" + "1" * 32
FW = "fw-" + "2" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def shared() -> tuple[RecordingDriver, FastAPI]:
    driver = RecordingDriver()
    settings = load_settings({"MODAL_WORKSPACE_ALLOWED_SECRETS": "github"})
    return driver, create_app(new_service(driver, settings), [TOKEN])


@pytest.fixture
def driver(shared: tuple[RecordingDriver, FastAPI]) -> RecordingDriver:
    shared[0].calls.clear()
    return shared[0]


@pytest.fixture
async def client(
    shared: tuple[RecordingDriver, FastAPI], driver: RecordingDriver
) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=shared[1])
    async with httpx2.AsyncClient(
        transport=transport, base_url="http://127.0.0.1", headers=AUTH
    ) as c:
        yield c


def assert_refused(response: httpx2.Response, status: int, field: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["field"] == field, error
    assert error["message"].startswith(field), error
    return dict(error)


HOSTILE_REPOSITORIES = [
    "https://evil.example/o/r",
    "https://github.com.evil.example/o/r",
    "https://user:token@github.com/o/r",
    "git@github.com:o/r.git",
    "ssh://git@github.com/o/r",
    "file:///etc/passwd",
    "ext::sh -c touch% /tmp/pwned",
    "--upload-pack=touch /tmp/pwned",
    "https://github.com/o/r?x=1",
    "https://github.com/o/../r",
    "o/r/extra",
    "https://github.com:8443/o/r",
    "o/r%2e%2e",
    "o/r\n",
]


@pytest.mark.parametrize("repository", HOSTILE_REPOSITORIES)
async def test_hostile_repositories_are_refused_before_the_driver(
    client: httpx2.AsyncClient, driver: RecordingDriver, repository: str
) -> None:
    response = await client.post(
        f"/api/workspaces/{WS}/repo/clone", json={"repository": repository}
    )
    error = assert_refused(response, 400, "repository")
    assert error["code"] == "invalid_argument"
    assert "token" not in error["message"] or "user:token" not in error["message"]
    assert driver.names() == []


@pytest.mark.parametrize(
    "ref", ["--upload-pack=x", "-b", "a..b", "HEAD@{1}", "main~1", "x:y", "refs/heads/a.lock", " "]
)
async def test_hostile_refs_are_refused(
    client: httpx2.AsyncClient, driver: RecordingDriver, ref: str
) -> None:
    clone = await client.post(
        f"/api/workspaces/{WS}/repo/clone", json={"repository": "o/r", "ref": ref}
    )
    assert_refused(clone, 400, "ref")
    checkout = await client.post(
        f"/api/workspaces/{WS}/repo/checkout", json={"destination": "r", "ref": ref}
    )
    assert_refused(checkout, 400, "ref")
    assert driver.names() == []


@pytest.mark.parametrize(
    "path", ["../etc/passwd", "/etc/passwd", "a/../../b", "/workspace/../x", "a\x00b", ""]
)
async def test_paths_that_leave_the_workspace_are_refused(
    client: httpx2.AsyncClient, driver: RecordingDriver, path: str
) -> None:
    base = f"/api/workspaces/{WS}"
    responses = [
        await client.get(f"{base}/files/content", params={"path": path}),
        await client.put(f"{base}/files/content", json={"path": path, "content": "x"}),
        await client.request("DELETE", f"{base}/files", params={"path": path}),
        await client.post(f"{base}/files/edit", json={"path": path, "old": "a", "new": "b"}),
        await client.get(f"{base}/files", params={"path": path}),
        await client.post(f"{base}/file-watches", json={"path": path}),
    ]
    for response in responses:
        assert_refused(response, 400, "path")
    clone = await client.post(f"{base}/repo/clone", json={"repository": "o/r", "destination": path})
    assert_refused(clone, 400, "destination")
    run = await client.post(f"{base}/exec", json={"command": "true", "workdir": path})
    assert_refused(run, 400, "workdir")
    assert driver.names() == []


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/api/workspaces/ws-123", "workspace_id"),
        ("/api/workspaces/WS-" + "0" * 32, "workspace_id"),
        (f"/api/workspaces/{'ex-' + '0' * 32}", "workspace_id"),
        (f"/api/workspaces/{WS}/realtime-execs/ex-zz", "exec_id"),
        (f"/api/workspaces/{WS}/realtime-execs/{FW}", "exec_id"),
        (f"/api/workspaces/{WS}/file-watches/{EX}", "watch_id"),
    ],
)
async def test_malformed_ids_are_refused_naming_the_field(
    client: httpx2.AsyncClient, driver: RecordingDriver, url: str, field: str
) -> None:
    assert_refused(await client.get(url), 400, field)
    assert driver.names() == []


@pytest.mark.parametrize(
    "tags",
    [
        {"managed-by": "me"},
        {"workspace-id": WS},
        {"workspace-root": "/"},
        {"repo-url": "https://github.com/o/r.git"},
        {"idempotency-key": "k"},
        {"created-at": "2020-01-01"},
        {"bad key": "v"},
        {"k": "line\nbreak"},
    ],
)
async def test_managed_or_malformed_tags_are_refused(
    client: httpx2.AsyncClient, driver: RecordingDriver, tags: dict[str, str]
) -> None:
    assert_refused(await client.post("/api/workspaces", json={"tags": tags}), 400, "tags")
    assert driver.names() == []


@pytest.mark.parametrize("name", ["1ABC", "A-B", "A B", "", "A=B", "PATH\x00"])
async def test_bad_env_names_are_refused(
    client: httpx2.AsyncClient, driver: RecordingDriver, name: str
) -> None:
    create = await client.post("/api/workspaces", json={"env": {name: "x"}})
    assert_refused(create, 400, "env")
    run = await client.post(
        f"/api/workspaces/{WS}/exec", json={"command": "env", "env": {name: "1"}}
    )
    assert_refused(run, 400, "env")
    assert driver.names() == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"command": "echo a\x00b"}, "command"),
        ({"command": "true", "env": {"A": "x\x00y"}}, "env"),
        ({"command": "true", "workdir": "src\x00"}, "workdir"),
    ],
)
async def test_a_nul_in_what_reaches_a_process_is_400_naming_the_field(
    client: httpx2.AsyncClient, driver: RecordingDriver, body: dict[str, Any], field: str
) -> None:
    # No argument, variable or path of a process can carry a NUL: refused before anything runs,
    # never started and answered with a 200 whose state is "failed".
    for path in ("exec", "realtime-execs"):
        response = await client.post(f"/api/workspaces/{WS}/{path}", json=body)
        assert assert_refused(response, 400, field)["code"] == "invalid_argument"
    assert driver.names() == []


async def test_secrets_outside_the_allowlist_are_forbidden_without_naming_the_allowed_ones(
    client: httpx2.AsyncClient, driver: RecordingDriver
) -> None:
    response = await client.post("/api/workspaces", json={"secret_names": ["prod-db"]})
    error = assert_refused(response, 403, "secret_names[0]")
    assert error["code"] == "permission"
    assert "MODAL_WORKSPACE_ALLOWED_SECRETS" in error["message"]
    assert "github" not in error["message"]
    volume = await client.post("/api/workspaces", json={"volumes": {"/data": "cache"}})
    assert volume.status_code == 403
    assert driver.names() == []


async def test_an_allowlisted_secret_without_values_is_forbidden_not_created(
    client: httpx2.AsyncClient, driver: RecordingDriver
) -> None:
    response = await client.post("/api/workspaces", json={"secret_names": ["github"]})
    assert_refused(response, 403, "secret_names[0]")
    assert driver.names() == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"command": "true", "unknown": 1}, "unknown"),
        ({"command": ""}, "command"),
        ({}, "command"),
        ({"command": "true", "timeout_seconds": 0}, "timeout_seconds"),
        ({"command": "true", "max_output_bytes": 10}, "max_output_bytes"),
    ],
)
async def test_bad_bodies_are_400_naming_the_field(
    client: httpx2.AsyncClient, driver: RecordingDriver, body: dict[str, Any], field: str
) -> None:
    assert_refused(await client.post(f"/api/workspaces/{WS}/exec", json=body), 400, field)
    assert driver.names() == []


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("realtime-execs", {"command": "sh", "pty": {"rows": 0, "cols": 80}}, "pty.rows"),
        ("realtime-execs", {"command": "sh", "pty": {"rows": 501, "cols": 80}}, "pty.rows"),
        ("realtime-execs", {"command": "sh", "pty": {"rows": 24, "cols": 1001}}, "pty.cols"),
        ("realtime-execs", {"command": "sh", "pty": {"rows": 24}}, "pty.cols"),
        ("realtime-execs", {"command": "sh", "pty": {"rows": 24, "cols": 80, "x": 1}}, "pty.x"),
        ("realtime-execs", {"command": "sh", "pty": True}, "pty"),
        (f"realtime-execs/{EX}/resize", {"rows": 0, "cols": 80}, "rows"),
        (f"realtime-execs/{EX}/resize", {"rows": 24, "cols": 1001}, "cols"),
        (f"realtime-execs/{EX}/resize", {"rows": 24}, "cols"),
    ],
)
async def test_terminal_sizes_out_of_bounds_are_400_naming_the_field(
    client: httpx2.AsyncClient, driver: RecordingDriver, route: str, body: dict, field: str
) -> None:
    response = await client.post(f"/api/workspaces/{WS}/{route}", json=body)
    assert_refused(response, 400, field)
    assert driver.names() == []


async def test_wait_seconds_above_25_is_refused(
    client: httpx2.AsyncClient, driver: RecordingDriver
) -> None:
    url = f"/api/workspaces/{WS}/realtime-execs/{EX}/events"
    assert_refused(await client.get(url, params={"wait_seconds": 26}), 400, "wait_seconds")
    assert_refused(await client.get(url, params={"cursor": -1}), 400, "cursor")
    assert driver.names() == []


async def test_a_body_that_is_not_json_is_400(client: httpx2.AsyncClient) -> None:
    response = await client.post(
        f"/api/workspaces/{WS}/exec",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_argument"


async def test_bodies_that_are_not_objects_or_name_a_path_parameter_are_400(
    client: httpx2.AsyncClient, driver: RecordingDriver
) -> None:
    url = f"/api/workspaces/{WS}/exec"
    for body in (b"[1, 2]", b'"text"', b"42"):
        response = await client.post(
            url, content=body, headers={"content-type": "application/json"}
        )
        assert response.status_code == 400, response.text
        assert response.json()["error"]["message"] == "the body must be a JSON object"
    # The workspace comes from the path alone: a body (or a query) naming another is refused.
    other = "ws-" + "9" * 32
    body = {"command": "true", "workspace_id": other}
    assert_refused(await client.post(url, json=body), 400, "workspace_id")
    events = f"/api/workspaces/{WS}/realtime-execs/{EX}/events"
    assert_refused(await client.get(events, params={"exec_id": EX}), 400, "exec_id")
    assert_refused(await client.get(events, params={"colour": "red"}), 400, "colour")
    assert driver.names() == []


async def test_query_values_are_parsed_by_the_operation_model(
    client: httpx2.AsyncClient, driver: RecordingDriver
) -> None:
    events = f"/api/workspaces/{WS}/realtime-execs/{EX}/events"
    assert_refused(await client.get(events, params={"cursor": "two"}), 400, "cursor")
    # Well-formed values get as far as the driver (which knows no workspace: 404).
    ok = await client.get(events, params={"cursor": "2", "wait_seconds": "0.5"})
    assert ok.status_code == 404, ok.text
    assert driver.names() == ["get"]


async def test_a_missing_workspace_is_404_not_400(
    client: httpx2.AsyncClient, driver: RecordingDriver
) -> None:
    for response in (
        await client.get(f"/api/workspaces/{WS}"),
        await client.delete(f"/api/workspaces/{WS}"),
        await client.post(f"/api/workspaces/{WS}/exec", json={"command": "true"}),
        await client.get(f"/api/workspaces/{WS}/files/content", params={"path": "a"}),
    ):
        assert response.status_code == 404, response.text
        error = response.json()["error"]
        assert error == {
            "code": "not_found",
            "message": f"workspace {WS} does not exist",
            "field": "workspace_id",
        }
    assert set(driver.names()) == {"get"}


async def test_unknown_routes_and_methods_use_the_error_shape(client: httpx2.AsyncClient) -> None:
    missing = await client.get("/api/nothing-here")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    wrong = await client.patch("/api/workspaces")
    assert wrong.status_code == 405
    assert wrong.json()["error"]["code"] == "method_not_allowed"


def test_a_core_refusal_becomes_the_gateways_error_in_one_place() -> None:
    with pytest.raises(InvalidArgumentError) as bad, core_refusal("workspace_id"):
        policy.check_id("ws", "ws-nope")
    assert bad.value.field == "workspace_id"
    assert bad.value.message.startswith("workspace_id: a workspace id must be")
    # An allowlist's denial is a permission's, and so is a link that fails its signature.
    with pytest.raises(PermissionDeniedError), core_refusal("secret_names[0]"):
        policy.allowed("other", ["github"], "MODAL_WORKSPACE_ALLOWED_SECRETS")
    key = b"k" * 32
    link = _core.mint_link(key, policy.new_id("ws"), "/workspace/a", 2_000_000_000)
    with pytest.raises(PermissionDeniedError), core_refusal(None):
        _core.verify_link(b"x" * 32, link, 0)
    with pytest.raises(InvalidArgumentError), core_refusal(None):
        _core.verify_link(key, "not a link", 0)
    # Another family where the caller's is another (a setting's).
    with (
        pytest.raises(ConfigError, match=r"^MODAL_X: "),
        core_refusal("MODAL_X", error=setting_error),
    ):
        policy.env_name("1bad")
