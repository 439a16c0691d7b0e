"""How `modal-workspace serve` writes responses and its access log (`http_serving`): a head and
its body in one write, a streamed response's head at once, and one uvicorn-format access line
per request, written after the response."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from modal_workspace_core.surfaces.http_serving import (
    AccessLog,
    CoalescingHttpToolsProtocol,
    CoalescingTransport,
)
from service_support import free_port
from starlette.types import Receive, Scope, Send


class RecordingTransport(asyncio.Transport):
    """Keeps each `write` call as it came (what would be one `send` each)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0


async def test_a_head_and_its_body_leave_in_one_write() -> None:
    inner = RecordingTransport()
    transport = CoalescingTransport(inner, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    transport.write(b"{}")
    assert inner.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    await asyncio.sleep(0)
    assert len(inner.writes) == 1, "nothing was left to flush"


async def test_a_write_alone_leaves_at_the_end_of_the_loops_turn() -> None:
    inner = RecordingTransport()
    transport = CoalescingTransport(inner, asyncio.get_running_loop())
    transport.write(b"head")
    assert inner.writes == []
    await asyncio.sleep(0)
    assert inner.writes == [b"head"]
    transport.write(b"chunk")
    await asyncio.sleep(0)
    assert inner.writes == [b"head", b"chunk"]


async def test_a_large_body_is_not_copied_to_join_its_head() -> None:
    inner = RecordingTransport()
    transport = CoalescingTransport(inner, asyncio.get_running_loop())
    body = b"x" * (1 << 20)
    transport.write(b"head")
    transport.write(body)
    assert inner.writes == [b"head", body]
    transport.write(body)
    assert inner.writes[-1] == body, "a large write is not held"


async def test_closing_sends_what_is_held_and_aborting_drops_it() -> None:
    loop = asyncio.get_running_loop()
    inner = RecordingTransport()
    transport = CoalescingTransport(inner, loop)
    transport.write(b"last words")
    transport.close()
    assert inner.writes == [b"last words"]
    assert inner.closed

    aborted = RecordingTransport()
    transport = CoalescingTransport(aborted, loop)
    transport.write(b"never")
    transport.abort()
    await asyncio.sleep(0)
    assert aborted.writes == []


async def streamed(scope: Scope, receive: Receive, send: Send) -> None:
    """An app whose body comes a while after its head (a stream, as MCP's SSE is)."""
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1")]})
    await asyncio.sleep(1.0)
    await send({"type": "http.response.body", "body": b"late", "more_body": False})


async def plain(scope: Scope, receive: Receive, send: Send) -> None:
    assert scope["type"] == "http"
    body = b'{"ok":true}'
    headers = [(b"content-type", b"application/json"), (b"content-length", b"11")]
    await send({"type": "http.response.start", "status": 201, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def failing(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError("the app broke")


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].removeprefix("lifespan.")
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    handler = {"/stream": streamed, "/plain": plain}.get(scope["path"], failing)
    await handler(scope, receive, send)


@contextlib.asynccontextmanager
async def server(log_delay: float = 0.001) -> AsyncIterator[int]:
    """The app as `serve` runs it (our protocol, `AccessLog`), on this test's loop."""
    port = free_port()
    config = uvicorn.Config(
        AccessLog(app, delay=log_delay),
        host="127.0.0.1",
        port=port,
        http=CoalescingHttpToolsProtocol,
        lifespan="on",
        log_config=None,
        server_header=False,
    )
    instance = uvicorn.Server(config)
    task = asyncio.create_task(instance.serve())
    while not instance.started:
        assert not task.done(), "uvicorn stopped at start"
        await asyncio.sleep(0.02)
    try:
        yield port
    finally:
        instance.should_exit = True
        await asyncio.wait_for(task, 30)


async def exchange(port: int, path: str, until: bytes, timeout: float) -> bytes:
    """Sends a GET and reads until `until` is in the reply (or the timeout passes)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
        got = b""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while until not in got:
                    chunk = await reader.read(65536)
                    if not chunk:
                        break
                    got += chunk
        return got
    finally:
        writer.close()


async def test_a_served_response_is_whole_and_names_no_server() -> None:
    async with server() as port:
        reply = await exchange(port, "/plain", b'{"ok":true}', 10)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 201 Created")
    assert body == b'{"ok":true}'
    assert b"server:" not in head.lower()


async def test_a_streamed_responses_head_arrives_before_its_body() -> None:
    async with server() as port:
        early = await exchange(port, "/stream", b"\r\n\r\n", 0.8)
        assert early.startswith(b"HTTP/1.1 200 OK")
        assert b"x-a: 1" in early.lower()
        assert b"late" not in early, "the body came only after a second"


async def test_each_request_gets_one_access_line_in_uvicorns_format(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="uvicorn.access")
    async with server() as port:
        await exchange(port, "/plain?cursor=3", b'{"ok":true}', 10)
        assert await exchange(port, "/broken", b"\r\n\r\n", 10)
        deadline = asyncio.get_running_loop().time() + 10
        while len(access_lines(caplog)) < 2 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
    lines = access_lines(caplog)
    assert [r.args[1:] for r in lines] == [  # type: ignore[index]
        ("GET", "/plain?cursor=3", "1.1", 201),
        ("GET", "/broken", "1.1", 500),
    ]
    host, _, port_text = lines[0].args[0].partition(":")  # type: ignore[index]
    assert host == "127.0.0.1" and port_text.isdigit()


async def test_access_lines_still_waiting_are_written_when_the_server_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="uvicorn.access")
    async with server(log_delay=3600) as port:
        await exchange(port, "/plain", b'{"ok":true}', 10)
        await asyncio.sleep(0.05)
        assert access_lines(caplog) == [], "the line waits for its moment"
    assert [r.args[2] for r in access_lines(caplog)] == ["/plain"]  # type: ignore[index]


def access_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "uvicorn.access"]
