"""Malformed input is the client's mistake: REST and MCP answer it with a 4xx, never a 5xx."""

from __future__ import annotations

from pathlib import Path

import httpx2

from .gateway import AUTH, Gateway, gateway

NESTED = b"[" * 100_000
JSON = {"content-type": "application/json"}
MCP = {**JSON, "accept": "application/json, text/event-stream"}
WS = "ws-" + "0" * 32


def _call(arguments: bytes) -> bytes:
    return (
        b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
        b'{"name": "workspace_get", "arguments": ' + arguments + b"}}"
    )


CASES = [
    # (method, path, headers, body)
    ("POST", "/api/workspaces", JSON, NESTED),
    ("POST", "/api/workspaces", JSON, b'{"tags": ' + NESTED + b"}"),
    ("POST", f"/api/workspaces/{WS}/exec", JSON, b'{"command": ' + NESTED + b"}"),
    ("POST", "/api/workspaces", JSON, b'{"idempotency_key": "\xff\xfe"}'),
    ("POST", "/api/workspaces", JSON, b'{"resources": {"cpu": 1e999}}'),
    ("POST", "/api/workspaces", JSON, b'{"resources": {"cpu": ' + b"9" * 100_000 + b"}}"),
    ("POST", "/api/workspaces", {"content-type": "application/x-www-form-urlencoded"}, b"a=1"),
    ("GET", f"/api/workspaces/{WS}/files/content?path=%ff%fe", {}, b""),
    ("GET", f"/api/workspaces/{WS}/realtime-execs?cursor=" + "9" * 10_000, {}, b""),
    ("POST", "/mcp/", MCP, NESTED),
    ("POST", "/mcp/", MCP, _call(NESTED)),
    ("POST", "/mcp/", MCP, b"\xff\xfe"),
    ("POST", "/mcp/", {"content-type": "text/plain", "accept": MCP["accept"]}, _call(b"{}")),
]


def _status(gw: Gateway, method: str, path: str, headers: dict[str, str], body: bytes) -> int:
    response = httpx2.request(
        method, gw.url(path), headers={**AUTH, **headers}, content=body, timeout=30
    )
    return response.status_code


def test_malformed_input_is_a_client_error_on_rest_and_mcp(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw:
        statuses = {i: _status(gw, *case) for i, case in enumerate(CASES)}

    wrong = {i: (CASES[i][:2], status) for i, status in statuses.items() if not 400 <= status < 500}
    assert wrong == {}
