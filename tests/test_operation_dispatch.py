"""`OperationDispatch` serves the operation table's routes itself and passes everything else on
to the app behind it (FastAPI), which also gets operation paths whose ids do not match and the
raw byte routes."""

from __future__ import annotations

import json

from modal_workspace_core.config import load_settings
from modal_workspace_core.operations import new_service
from modal_workspace_core.surfaces.rest.dispatch import OperationDispatch
from modal_workspace_core.surfaces.rest.routes import OperationServer
from service_support import RecordingDriver
from starlette.types import Receive, Scope, Send
from support.asgi_request import request

WS = "ws-" + "0" * 32
EX = "ex-" + "1" * 32


class Behind:
    """The app behind the dispatcher: records what reached it and answers 299."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.paths.append(scope["path"])
        await send({"type": "http.response.start", "status": 299, "headers": []})
        await send({"type": "http.response.body", "body": b""})


def dispatch() -> tuple[OperationDispatch, Behind, RecordingDriver]:
    driver = RecordingDriver()
    behind = Behind()
    service = new_service(driver, load_settings({}))
    return OperationDispatch(behind, OperationServer.every(service)), behind, driver


async def test_an_operation_route_is_answered_without_the_app_behind() -> None:
    app, behind, driver = dispatch()
    status, headers, body = await request(app, "GET", "/api/workspaces")
    assert status == 200
    assert headers[b"content-type"] == b"application/json"
    assert int(headers[b"content-length"]) == len(body)
    assert json.loads(body) == {"workspaces": [], "truncated": False}
    assert behind.paths == []
    assert [name for name, _ in driver.calls] == ["list"]


async def test_a_workspace_error_is_answered_in_the_error_shape() -> None:
    app, behind, _ = dispatch()
    status, _, body = await request(app, "GET", f"/api/workspaces/{WS}/realtime-execs/{EX}")
    assert status == 404
    assert json.loads(body)["error"]["code"] == "not_found"
    status, _, body = await request(
        app, "GET", f"/api/workspaces/{WS}/realtime-execs/{EX}/events", b"cursor=-1"
    )
    assert status == 400
    assert json.loads(body)["error"]["field"] == "cursor"
    assert behind.paths == []


async def test_a_body_read_in_parts_is_validated_by_the_operation() -> None:
    app, behind, _ = dispatch()
    status, _, body = await request(
        app, "POST", f"/api/workspaces/{WS}/realtime-execs", body=b'{"command": "true", "x": 1}'
    )
    assert status == 400
    assert json.loads(body)["error"]["field"] == "x"
    assert behind.paths == []


async def test_repeated_query_fields_take_the_last_as_the_router_does() -> None:
    app, behind, _ = dispatch()
    status, _, body = await request(
        app, "GET", f"/api/workspaces/{WS}/realtime-execs/{EX}/events", b"cursor=-1&cursor=2"
    )
    # The last `cursor` (2) is valid: the refusal is the exec's, not the cursor's.
    assert status == 404, body
    assert json.loads(body)["error"]["code"] == "not_found"
    assert behind.paths == []


async def test_everything_else_goes_on_to_the_app_behind() -> None:
    app, behind, driver = dispatch()
    for method, path in [
        ("GET", "/healthz"),
        ("GET", "/api/nowhere"),
        ("PUT", "/api/workspaces"),  # a method no operation has on this path
        ("HEAD", "/api/workspaces"),
        ("GET", "/api/workspaces/ws-NOT-AN-ID"),  # FastAPI answers it with its 400
        ("GET", "/api/workspaces/"),
        # A raw byte route (an upload streamed as it comes) is FastAPI's to serve.
        ("PUT", f"/api/workspaces/{WS}/artifacts"),
    ]:
        status, _, _ = await request(app, method, path)
        assert status == 299, (method, path)
    assert len(behind.paths) == 7
    assert driver.calls == []
