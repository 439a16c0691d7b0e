"""One HTTP request straight into an ASGI app, with no server between: its status, headers and
body. The body arrives in two messages, so an app that reads only the first is caught."""

from __future__ import annotations

from typing import Any

from starlette.types import Message

TOKEN = "a-test-token-of-some-length"


async def request(
    app: Any,
    method: str,
    path: str,
    query: bytes = b"",
    body: bytes = b"",
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
    server: tuple[str, int] = ("127.0.0.1", 80),
) -> tuple[int, dict[bytes, bytes], bytes]:
    """`headers` default to a `Host` and the bearer token `TOKEN`."""
    if headers is None:
        headers = [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {TOKEN}".encode())]
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query,
        "headers": headers,
        "client": ("127.0.0.1", 1234),
        "server": server,
    }
    chunks = [body[: len(body) // 2], body[len(body) // 2 :]]

    async def receive() -> Message:
        if chunks:
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}
        return {"type": "http.disconnect"}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start, *bodies = [m for m in sent if m["type"].startswith("http.response")]
    return start["status"], dict(start["headers"]), b"".join(m.get("body", b"") for m in bodies)
