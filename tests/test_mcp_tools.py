"""MCP over real HTTP: the official SDK client, in both protocol generations, against the app
under uvicorn on 127.0.0.1. Tools match the table; errors come back as `isError` results with
the REST error text; no token, no MCP."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from modal_workspace_core.config import load_settings
from modal_workspace_core.operations import OPERATIONS, new_service, offered
from modal_workspace_core.operations.machinery.table import first_clause
from modal_workspace_core.surfaces.mcp import INSTRUCTIONS, tools
from modal_workspace_core.surfaces.rest.app import create_app
from service_support import TOKEN, RecordingDriver, serving

MODES = ["legacy", "2026-07-28"]
WS = "ws-" + "0" * 32
FUNCTION_OPS = {
    "function_call",
    "function_spawn",
    "function_call_get",
    "function_call_cancel",
    "app_get",
    "app_list",
}


@pytest.fixture
def driver() -> RecordingDriver:
    return RecordingDriver()


@pytest.fixture
async def base_url(driver: RecordingDriver) -> AsyncIterator[str]:
    app = create_app(new_service(driver, load_settings({})), [TOKEN])
    async with serving(app) as url:
        yield url


def mcp_client(
    base_url: str,
    mode: str,
    token: str | None = TOKEN,
    transport: httpx2.AsyncBaseTransport | None = None,
) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=60, transport=transport)
    return Client(streamable_http_client(f"{base_url}/mcp/", http_client=http), mode=mode)


class RecordingTransport(httpx2.AsyncBaseTransport):
    """Real HTTP that keeps every answer's body as it arrived (an SSE stream or JSON)."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.bodies: list[bytes] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        body = b"".join([chunk async for chunk in response.stream])
        await response.aclose()
        self.bodies.append(body)
        return httpx2.Response(
            response.status_code, headers=response.headers, content=body, request=request
        )

    def messages(self) -> list[bytes]:
        """Each JSON-RPC message received, as its encoded bytes."""
        found = []
        for body in self.bodies:
            if body.startswith(b"{"):
                found.append(body)
            found.extend(
                line.removeprefix(b"data:").strip()
                for line in body.splitlines()
                if line.startswith(b"data:")
            )
        return found


@pytest.mark.parametrize("mode", MODES)
async def test_the_sdk_client_lists_one_tool_per_operation(base_url: str, mode: str) -> None:
    async with mcp_client(base_url, mode) as client:
        tools = (await client.list_tools()).tools
    # Every operation but the function ones, which no allowlist turned on here.
    assert {t.name for t in tools} == {op.name for op in offered(load_settings({}))}
    assert {op.name for op in OPERATIONS} - {t.name for t in tools} == FUNCTION_OPS
    for tool in tools:
        hints = tool.annotations
        assert hints is not None, tool.name
        for hint in ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint"):
            assert isinstance(getattr(hints, hint), bool), (tool.name, hint)
        assert tool.output_schema is not None and tool.output_schema["type"] == "object"
    by_name = {t.name: t.annotations for t in tools}
    # Delivering the work reaches the world beyond the workspace: a push may replace a branch.
    push, pull = by_name["repo_push"], by_name["repo_pull_request"]
    assert push is not None and pull is not None
    assert (push.read_only_hint, push.destructive_hint, push.open_world_hint) == (False, True, True)
    assert (pull.read_only_hint, pull.open_world_hint, pull.idempotent_hint) == (False, True, True)


# What the tool list may cost a host, in bytes of its answer, for today's 51 tools. (It was
# 114 600 bytes before the schemas were made as short as they can be while complete; the three
# template tools fitted 40 000 once what several tools' inputs share was said once,
# `InputSchemas`. workspace_metrics, as short as it can be, costs 720 more, and the four
# experiment tools 3 900: the budget grew to 45 000 for them, not by trimming what other tools
# say. experiment_page_url, with a one-line summary and no limits, costs 640: the list came to
# 45 426 bytes, so the budget grew by the least round step over it, to 45 500. A terminal's size
# (the start's `pty` object and workspace_realtime_exec_resize) costs 1 000: 46 421, so 46 500.
# workspace_preview_url and workspace_create's ports cost 980 more: 47 400, so 47 500.
# file_patch, with both formats in its summary, costs 1 100 more: 48 500, so 48 600.
# workspace_terminal_url (a one-line summary, two inputs described) costs 760: 49 254, so 49 300.
# The next saving at hand: the per-kind event reads, which stream_events does for every stream,
# listed on REST alone.)
TOOL_LIST_BUDGET = 49_300


@pytest.mark.parametrize("mode", MODES)
async def test_the_tool_list_costs_a_host_at_most_its_budget(base_url: str, mode: str) -> None:
    recorder = RecordingTransport()
    async with mcp_client(base_url, mode, transport=recorder) as client:
        listed = (await client.list_tools()).tools
    assert len(listed) == 51, "a new tool: see whether the budget still holds it"
    (answer,) = [m for m in recorder.messages() if "tools" in json.loads(m).get("result", {})]
    print(mode, len(answer))
    assert len(answer) <= TOOL_LIST_BUDGET, f"tools/list is {len(answer)} bytes"


def whole(title: str) -> bool:
    """Not cut short: its parentheses close, and it ends on a word, not an ellipsis or a colon."""
    depth = 0
    for char in title:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0 and not title.endswith(("…", "...", ":", ";", ",", "-"))


def test_every_tool_title_is_whole_and_at_most_60_characters() -> None:
    for tool in tools():  # every operation's, the function ones included
        title = tool.annotations.title if tool.annotations else None
        assert title, tool.name
        assert len(title) <= 60, (tool.name, title)
        assert whole(title), (tool.name, title)


def test_a_title_is_the_summarys_first_clause_outside_parentheses() -> None:
    summary = "Resume a workspace from a snapshot (default: its latest): the same id."
    assert first_clause(summary) == "Resume a workspace from a snapshot (default: its latest)"
    assert first_clause("Send stdin to a realtime exec; eof closes it.") == (
        "Send stdin to a realtime exec"
    )
    assert first_clause("Read a file (text, e.g. logs).") == "Read a file (text, e.g. logs)"


def test_a_cut_title_is_seen() -> None:
    assert not whole("Resume a workspace from a snapshot (default")
    assert not whole("Snapshot the workspace's files…")
    assert whole("Download a file or a directory (a tar)")


async def test_the_server_teaches_the_cursor_loop(base_url: str) -> None:
    async with mcp_client(base_url, "legacy") as client:
        instructions = client.session.initialize_result.instructions  # type: ignore[union-attr]
    assert instructions == INSTRUCTIONS
    assert "next_cursor" in INSTRUCTIONS and "done" in INSTRUCTIONS


@pytest.mark.parametrize("mode", MODES)
async def test_hostile_input_is_an_error_result_with_the_rest_text(
    base_url: str, driver: RecordingDriver, mode: str
) -> None:
    async with mcp_client(base_url, mode) as client:
        result = await client.call_tool(
            "repo_clone", {"workspace_id": WS, "repository": "https://evil.example/o/r"}
        )
    assert result.is_error
    body = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert body["error"]["code"] == "invalid_argument"
    assert body["error"]["field"] == "repository"
    assert driver.names() == []
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        rest = await http.post(
            f"{base_url}/api/workspaces/{WS}/repo/clone",
            json={"repository": "https://evil.example/o/r"},
        )
    assert rest.json() == body


@pytest.mark.parametrize("mode", MODES)
async def test_a_missing_workspace_is_a_not_found_error_result(base_url: str, mode: str) -> None:
    async with mcp_client(base_url, mode) as client:
        result = await client.call_tool("workspace_get", {"workspace_id": WS})
    assert result.is_error
    assert json.loads(result.content[0].text)["error"]["code"] == "not_found"  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", MODES)
async def test_a_structured_result_matches_the_output_model(base_url: str, mode: str) -> None:
    async with mcp_client(base_url, mode) as client:
        result = await client.call_tool("workspace_list", {})
    assert not result.is_error
    assert result.structured_content == {"workspaces": [], "truncated": False}


async def test_mcp_without_a_token_is_refused(base_url: str) -> None:
    async with httpx2.AsyncClient() as http:
        response = await http.post(
            f"{base_url}/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}
        )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


async def test_mcp_answers_at_the_path_without_a_trailing_slash(base_url: str) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    http = httpx2.AsyncClient(headers=headers, timeout=60)
    async with Client(
        streamable_http_client(f"{base_url}/mcp", http_client=http), mode="legacy"
    ) as c:
        assert len((await c.list_tools()).tools) == len(OPERATIONS) - len(FUNCTION_OPS)


async def test_a_foreign_host_header_is_refused_on_loopback(base_url: str) -> None:
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Host": "attacker.example",
        "Accept": "application/json, text/event-stream",
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    async with httpx2.AsyncClient() as http:
        response = await http.post(f"{base_url}/mcp/", json=body, headers=headers)
    assert response.status_code in (400, 403, 421)
