"""The published schemas: the GPT Actions document within Actions' limits, with servers taken
from the request; the full document with every operation and our error model instead of 422."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI
from modal_workspace_core._core import StreamKind
from modal_workspace_core.config import load_settings
from modal_workspace_core.operations import OPERATIONS, new_service
from modal_workspace_core.operations.machinery.table import DESTROY, PUBLISH, PUBLISH_ONCE
from modal_workspace_core.policy import new_id
from modal_workspace_core.surfaces.rest.app import create_app
from service_support import TOKEN, RecordingDriver
from support.asgi_request import request

METHODS = {"get", "put", "post", "delete", "patch"}


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return create_app(new_service(RecordingDriver(), load_settings({})), [TOKEN])


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx2.AsyncClient]:
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as c:
        yield c


def operations(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        op for item in schema["paths"].values() for method, op in item.items() if method in METHODS
    ]


def descriptions(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        if isinstance(node.get("description"), str):
            found.append(node["description"])
        for value in node.values():
            found.extend(descriptions(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(descriptions(value))
    return found


async def test_the_actions_schema_fits_gpt_actions_limits(client: httpx2.AsyncClient) -> None:
    schema = (await client.get("/action-openapi.json")).json()
    ops = operations(schema)
    assert 0 < len(ops) <= 30
    ids = [op["operationId"] for op in ops]
    assert len(ids) == len(set(ids))
    assert set(ids) == {op.name for op in OPERATIONS if op.in_actions}
    for op in ops:
        assert len(op["summary"]) <= 300
        assert len(op.get("description", "")) <= 300
        for param in op.get("parameters", []):
            for text in descriptions(param):
                assert len(text) <= 700, (op["operationId"], param["name"])
        assert "422" not in op["responses"]
        assert {"400", "401", "404"} <= set(op["responses"])
    for text in descriptions(schema["components"]["schemas"]):
        assert len(text) <= 700


async def test_the_actions_schema_declares_bearer_auth(client: httpx2.AsyncClient) -> None:
    schema = (await client.get("/action-openapi.json")).json()
    assert schema["components"]["securitySchemes"] == {
        "bearerAuth": {"type": "http", "scheme": "bearer"}
    }
    assert schema["security"] == [{"bearerAuth": []}]


async def test_every_reference_in_the_actions_schema_resolves(client: httpx2.AsyncClient) -> None:
    schema = (await client.get("/action-openapi.json")).json()
    refs: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.add(node["$ref"].rsplit("/", 1)[1])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    assert refs <= set(schema["components"]["schemas"])


PROXY_HEADERS = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "ws.example.org"}


async def test_servers_come_from_the_request(client: httpx2.AsyncClient) -> None:
    direct = (await client.get("/action-openapi.json")).json()
    assert direct["servers"] == [{"url": "http://127.0.0.1:8000"}]
    # No proxy is trusted by default: a client cannot name the server it is told to use.
    spoofed = await client.get("/action-openapi.json", headers=PROXY_HEADERS)
    assert spoofed.json()["servers"] == [{"url": "http://127.0.0.1:8000"}]


async def test_servers_without_a_host_header_are_where_the_server_listens(app: FastAPI) -> None:
    # HTTP/1.0 needs no Host: the server's own address stands in, its port left out where it is
    # the scheme's default.
    async def schema(server: tuple[str, int]) -> Any:
        _, _, body = await request(app, "GET", "/action-openapi.json", headers=[], server=server)
        return json.loads(body)

    assert (await schema(("10.0.0.1", 8080)))["servers"] == [{"url": "http://10.0.0.1:8080"}]
    assert (await schema(("10.0.0.1", 80)))["servers"] == [{"url": "http://10.0.0.1"}]


async def test_servers_follow_the_headers_of_a_trusted_proxy() -> None:
    settings = load_settings({"MODAL_WORKSPACE_TRUSTED_PROXIES": "127.0.0.1"})
    app = create_app(new_service(RecordingDriver(), settings), [TOKEN])
    transport = httpx2.ASGITransport(app=app, client=("127.0.0.1", 4321))
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as c:
        proxied = await c.get("/action-openapi.json", headers=PROXY_HEADERS)
    assert proxied.json()["servers"] == [{"url": "https://ws.example.org"}]


async def test_servers_are_the_configured_public_url() -> None:
    settings = load_settings({"MODAL_WORKSPACE_PUBLIC_URL": "https://gw.example.com/"})
    app = create_app(new_service(RecordingDriver(), settings), [TOKEN])
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as c:
        schema = (await c.get("/action-openapi.json", headers=PROXY_HEADERS)).json()
    assert schema["servers"] == [{"url": "https://gw.example.com"}]


async def test_the_full_schema_lists_every_operation_without_422(
    client: httpx2.AsyncClient,
) -> None:
    schema = (await client.get("/openapi.json")).json()
    ops = operations(schema)
    assert {op["operationId"] for op in ops} == {op.name for op in OPERATIONS}
    assert all("422" not in op["responses"] for op in ops)
    assert "HTTPValidationError" not in schema["components"]["schemas"]


async def test_event_pages_default_well_under_100000_characters(
    client: httpx2.AsyncClient,
) -> None:
    schema = (await client.get("/action-openapi.json")).json()
    # GPT Actions reads every stream (an exec's, a watch's) through stream_events.
    events = schema["paths"]["/api/workspaces/{workspace_id}/streams/{stream_id}/events"]
    params = {p["name"]: p["schema"] for p in events["get"]["parameters"]}
    assert params["max_bytes"]["default"] <= 60_000
    assert params["wait_seconds"]["maximum"] == 25


async def test_every_field_of_the_actions_schema_is_described_at_its_top(
    client: httpx2.AsyncClient,
) -> None:
    schema = (await client.get("/action-openapi.json")).json()
    missing = []
    for name, component in schema["components"]["schemas"].items():
        for field, spec in component.get("properties", {}).items():
            # At the property itself, not inside an anyOf branch a client may not read.
            if not spec.get("description"):
                missing.append(f"{name}.{field}")
    for op in operations(schema):
        for parameter in op.get("parameters", []):
            if not parameter.get("description"):
                missing.append(f"{op['operationId']}:{parameter['name']}")
    assert not missing, missing


async def test_request_bodies_are_plain_references_and_the_loop_is_explained(
    client: httpx2.AsyncClient,
) -> None:
    schema = (await client.get("/action-openapi.json")).json()
    for op in operations(schema):
        body = op.get("requestBody")
        if body is not None:
            assert set(body["content"]["application/json"]["schema"]) == {"$ref"}, op
    events = [op for op in operations(schema) if op["operationId"].startswith("stream_events")]
    (page,) = events
    text = page["description"]
    assert "wait_seconds=25" in text and "empty page" in text and "done" in text


async def test_gpt_actions_asks_first_only_before_deleting_or_publishing(
    client: httpx2.AsyncClient,
) -> None:
    schema = (await client.get("/action-openapi.json")).json()
    flags = {
        op["operationId"]: op.get("x-openai-isConsequential")
        for item in schema["paths"].values()
        for op in item.values()
    }
    # Said of every operation: without it, Actions confirms every call but a GET, every time.
    assert all(isinstance(flag, bool) for flag in flags.values()), flags
    asked = {name for name, flag in flags.items() if flag}
    assert asked == {
        "workspace_terminate",
        "workspace_snapshot_delete",
        "file_remove",
        "repo_push",
        "repo_pull_request",
    }
    # The rule, held against the table's hints: what deletes (DESTROY, a DELETE route) or
    # reaches outside the workspace to publish (PUBLISH, PUBLISH_ONCE) asks; what only reads or
    # changes the workspace itself (exec, clone, file edits, polls, snapshots, forks) does not.
    by_name = {op.name: op for op in OPERATIONS}
    for name, flag in flags.items():
        hints = by_name[name].hints
        assert flag is (hints in (DESTROY, PUBLISH, PUBLISH_ONCE)), name
        if hints is DESTROY:
            assert by_name[name].method == "DELETE", name
    for name in ("workspace_exec", "repo_clone", "file_write", "stream_events", "workspace_fork"):
        assert flags[name] is False, name


# Which ids flow into each parameter that reads one: the answers that hand them out (an exec's,
# a watch's, and a snapshot's `progress_stream_id`, a task stream, all go to `stream_id`).
FLOWS: dict[str, list[str]] = {
    "workspace_id": [new_id("ws")],
    "exec_id": [new_id("ex")],
    "watch_id": [new_id("fw")],
    "snapshot_id": [new_id("sn")],
    "run_id": [new_id("xp")],
    "stream_id": [new_id("ex"), new_id("fw"), new_id("tk")],
    "function_call_id": ["fc-" + "A1" * 11],
    "app_name": ["my-app.v2"],
    "name": ["web-app", "py3.12_base"],  # a template's, as template_create and _list answer it
}


@pytest.mark.parametrize("document", ["/action-openapi.json", "/openapi.json"])
async def test_every_id_an_answer_hands_out_is_accepted_where_it_is_read(
    client: httpx2.AsyncClient, document: str
) -> None:
    schema = (await client.get(document)).json()
    seen = set()
    for op in operations(schema):
        for param in op.get("parameters", []):
            if param["in"] != "path":
                continue
            name, pattern = param["name"], param["schema"]["pattern"]
            seen.add(name)
            for value in FLOWS[name]:
                assert re.fullmatch(pattern, value), (op["operationId"], name, value, pattern)
            # And nothing the core refuses: a near miss of each.
            for value in FLOWS[name]:
                assert not re.fullmatch(pattern, value + "/x"), (op["operationId"], name)
    assert {"workspace_id", "stream_id"} <= seen


async def test_a_snapshots_progress_stream_is_readable_with_stream_events(
    client: httpx2.AsyncClient,
) -> None:
    """The `tk-` case: a snapshot answer hands out a task stream for `stream_events`."""
    schema = (await client.get("/action-openapi.json")).json()
    (reader,) = [op for op in operations(schema) if op["operationId"] == "stream_events"]
    (stream,) = [p for p in reader["parameters"] if p["name"] == "stream_id"]
    handed_out = new_id("tk")  # what `operations/task_stream.py` mints for a snapshot's progress
    assert re.fullmatch(stream["schema"]["pattern"], handed_out)
    assert stream["schema"]["pattern"] == StreamKind.id_pattern()
