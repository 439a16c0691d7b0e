"""A request body over the bound is refused with 413 in the error shape, whether its length is
declared or it just keeps coming, and nothing reaches the driver; bodies under it pass."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from modal_workspace_core.config import load_settings
from modal_workspace_core.errors import LimitError
from modal_workspace_core.operations import new_service
from modal_workspace_core.surfaces.rest.app import create_app
from modal_workspace_core.surfaces.rest.body_limit import MAX_REQUEST_BYTES, BodyLimit
from service_support import TOKEN, RecordingDriver
from starlette.types import Message, Receive, Scope, Send

WS = "ws-" + "0" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def echo_length(scope: Scope, receive: Receive, send: Send) -> None:
    """Reads the whole body, then answers its length."""
    total = 0
    while True:
        message = await receive()
        total += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = str(total).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


async def call(app: Any, chunks: list[bytes], headers: list[tuple[bytes, bytes]]) -> Any:
    scope = {"type": "http", "method": "POST", "path": "/", "headers": headers}
    pending = list(chunks)

    async def receive() -> Message:
        chunk = pending.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def test_a_declared_length_over_the_bound_is_refused_before_any_read() -> None:
    reached: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        reached.append(scope)
        await echo_length(scope, receive, send)

    sent = await call(BodyLimit(app, 10), [b"x" * 11], [(b"content-length", b"11")])
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["error"]["code"] == "limit"
    assert reached == [], "the app behind was called"


async def test_a_body_that_grows_past_the_bound_fails_its_read() -> None:
    app = BodyLimit(echo_length, 10)
    with pytest.raises(LimitError):  # the app's read fails; the API answers it with a 413
        await call(app, [b"x" * 6, b"x" * 6], [])
    sent = await call(app, [b"x" * 5, b"x" * 5], [(b"content-length", b"10")])
    assert sent[1]["body"] == b"10", "a body at the bound is read whole"


async def test_the_api_refuses_an_oversized_body_with_413_and_calls_no_driver() -> None:
    driver = RecordingDriver()
    app = create_app(new_service(driver, load_settings({})), [TOKEN])
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://t", headers=AUTH) as c:
        big = b'{"path": "a", "content": "' + b"x" * MAX_REQUEST_BYTES + b'"}'
        declared = await c.put(f"/api/workspaces/{WS}/files/content", content=big)

        async def stream() -> Any:  # no length declared: the bound is met while reading
            yield b'{"path": "a", "content": "'
            for _ in range(MAX_REQUEST_BYTES // (1 << 20) + 1):
                yield b"x" * (1 << 20)
            yield b'"}'

        streamed = await c.put(f"/api/workspaces/{WS}/files/content", content=stream())
    for response in (declared, streamed):
        assert response.status_code == 413, response.text
        assert response.json()["error"]["code"] == "limit"
    assert driver.calls == []


async def test_a_raw_upload_route_has_its_own_bound_and_no_other_route_does() -> None:
    routes = [("PUT", "/api/workspaces/{workspace_id}/artifacts")]
    app = BodyLimit(echo_length, 10, raw_routes=routes, raw_max_bytes=100)

    async def send(method: str, path: str, size: int) -> int:
        scope_path = path.format(workspace_id=WS)
        headers = [(b"content-length", str(size).encode())]
        sent: list[Message] = []

        async def receive() -> Message:
            return {"type": "http.request", "body": b"x" * size, "more_body": False}

        async def record(message: Message) -> None:
            sent.append(message)

        scope = {"type": "http", "method": method, "path": scope_path, "headers": headers}
        await app(scope, receive, record)
        return int(sent[0]["status"])

    upload = "/api/workspaces/{workspace_id}/artifacts"
    assert await send("PUT", upload, 100) == 200
    assert await send("PUT", upload, 101) == 413
    assert await send("GET", upload, 11) == 413  # only the upload's method
    assert await send("PUT", upload + "/x", 11) == 413  # only the route itself
    assert await send("PUT", "/api/workspaces/{workspace_id}/files/content", 11) == 413
