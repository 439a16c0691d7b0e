"""The operation table's REST routes, served by FastAPI's one router: an operation answers its
JSON, a `WorkspaceError` the error shape, a body read in parts is validated by the operation's
own model, and paths that match no operation get FastAPI's 404/405/307 (ids that do not match
their pattern its 400) without the driver being asked anything."""

from __future__ import annotations

import json
from typing import Any

from modal_workspace_core.config import load_settings
from modal_workspace_core.operations import new_service
from modal_workspace_core.surfaces.rest.app import create_app
from service_support import RecordingDriver
from support.asgi_request import TOKEN, request

WS = "ws-" + "0" * 32
EX = "ex-" + "1" * 32


def app_on_a_recording_driver() -> tuple[Any, RecordingDriver]:
    driver = RecordingDriver()
    return create_app(new_service(driver, load_settings({})), [TOKEN]), driver


async def test_an_operation_route_answers_its_json() -> None:
    app, driver = app_on_a_recording_driver()
    status, headers, body = await request(app, "GET", "/api/workspaces")
    assert status == 200
    assert headers[b"content-type"] == b"application/json"
    assert int(headers[b"content-length"]) == len(body)
    assert json.loads(body) == {"workspaces": [], "truncated": False}
    assert [name for name, _ in driver.calls] == ["list"]


async def test_a_workspace_error_is_answered_in_the_error_shape() -> None:
    app, _ = app_on_a_recording_driver()
    status, _, body = await request(app, "GET", f"/api/workspaces/{WS}/realtime-execs/{EX}")
    assert status == 404
    assert json.loads(body)["error"]["code"] == "not_found"
    status, _, body = await request(
        app, "GET", f"/api/workspaces/{WS}/realtime-execs/{EX}/events", b"cursor=-1"
    )
    assert status == 400
    assert json.loads(body)["error"]["field"] == "cursor"


async def test_a_body_read_in_parts_is_validated_by_the_operation() -> None:
    app, driver = app_on_a_recording_driver()
    status, _, body = await request(
        app, "POST", f"/api/workspaces/{WS}/realtime-execs", body=b'{"command": "true", "x": 1}'
    )
    assert status == 400
    assert json.loads(body)["error"]["field"] == "x"
    assert driver.calls == []


async def test_paths_that_match_no_operation_are_refused_without_the_driver() -> None:
    app, driver = app_on_a_recording_driver()
    for method, path, expected in [
        ("GET", "/api/nowhere", 404),
        ("PUT", "/api/workspaces", 405),  # a method no operation has on this path
        ("GET", "/api/workspaces/ws-NOT-AN-ID", 400),
        ("GET", "/api/workspaces/", 307),  # FastAPI's redirect to the path without the slash
    ]:
        status, _, body = await request(app, method, path)
        assert status == expected, (method, path, body)
        assert status == 307 or "error" in json.loads(body), body
    assert driver.calls == []
