"""A stateless MCP endpoint has no server-to-client stream to offer: `GET /mcp/` is answered at
once (405), never held open as an SSE stream that nothing will ever write to."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest

from .gateway import AUTH, gateway

# Far more than an answer needs; a held stream never ends within it.
ANSWER_TIMEOUT = 30.0


@pytest.mark.parametrize("path", ["/mcp/", "/mcp"])
def test_get_on_the_mcp_endpoint_is_refused_at_once(tmp_path: Path, path: str) -> None:
    headers = {**AUTH, "Accept": "text/event-stream"}
    with (
        gateway(tmp_path) as gw,
        # Streamed: a held SSE stream sends keep-alive pings, so reading it whole never ends.
        httpx2.stream("GET", gw.url(path), headers=headers, timeout=ANSWER_TIMEOUT) as response,
    ):
        kind = response.headers.get("content-type", "")
        status = response.status_code
        body = response.read() if "event-stream" not in kind else b""

    assert "event-stream" not in kind
    assert status == 405
    assert response.headers["allow"] == "POST"
    assert json.loads(body)["error"]["code"] == "method_not_allowed"
