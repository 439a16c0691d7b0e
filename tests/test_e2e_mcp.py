"""End to end through the official MCP client over real HTTP: `modal-workspace serve` on
127.0.0.1 with the real agent, on the local driver and on the Modal driver against the test
control plane; create, clone, a realtime exec with stdin and cancel followed by the cursor loop,
files, diff, terminate — in both protocol generations."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from e2e_support import BACKENDS, Served, backend_for, serve
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from service_support import TOKEN
from support.git_server import GitServer

pytest.importorskip("modal_workspace_core.drivers.local.driver")


@pytest.fixture(params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path: Path, git_server: GitServer
) -> Iterator[Served]:
    with (
        backend_for(request.param, tmp_path, git_server.token) as backend,
        serve(tmp_path, git_server.token, backend, github_env=git_server.gateway_env) as s,
    ):
        yield s


class Tools:
    """Calls tools and returns their structured output, failing on an error result."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def __call__(self, name: str, **args: Any) -> dict[str, Any]:
        result = await self.client.call_tool(name, args)
        assert not result.is_error, result.content
        assert isinstance(result.structured_content, dict)
        # The text content carries the same JSON, for clients that ignore structured output.
        assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
        return result.structured_content

    async def error(self, name: str, **args: Any) -> dict[str, Any]:
        result = await self.client.call_tool(name, args)
        assert result.is_error
        body: dict[str, Any] = json.loads(result.content[0].text)["error"]  # type: ignore[union-attr]
        return body

    async def drain(self, ws: str, exec_id: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        cursor, events, deadline = 0, [], time.monotonic() + 180
        while True:
            page = await self(
                "workspace_realtime_exec_events",
                workspace_id=ws,
                exec_id=exec_id,
                cursor=cursor,
                wait_seconds=10,
            )
            events += page["events"]
            cursor = page["next_cursor"]
            if page["done"]:
                break
            assert time.monotonic() < deadline
        assert [e.get("seq_start", e["seq"]) for e in events] == list(range(1, len(events) + 1))
        return events, page


def stdout(events: list[dict[str, Any]]) -> str:
    data = b""
    for e in events:
        if e["type"] == "stdout":
            data += base64.b64decode(e["data_b64"]) if "data_b64" in e else e["data"].encode()
    return data.decode()


def connect(served: Served, mode: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
    return Client(streamable_http_client(f"{served.base_url}/mcp/", http_client=http), mode=mode)


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_the_whole_job_through_mcp(served: Served, git_server: GitServer, mode: str) -> None:
    async with connect(served, mode) as client:
        call = Tools(client)
        ws = (await call("workspace_create", idempotency_key=f"mcp-{mode}"))["workspace_id"]
        clone = await call(
            "repo_clone", workspace_id=ws, repository="octo/hello", use_github_token=True
        )
        _, last = await call.drain(ws, clone["exec_id"])
        assert (last["state"], last["returncode"]) == ("finished", 0)

        cat = await call("workspace_realtime_exec_start", workspace_id=ws, command="cat")
        await call(
            "workspace_realtime_exec_input",
            workspace_id=ws,
            exec_id=cat["exec_id"],
            data="ping\n",
            eof=True,
        )
        events, _ = await call.drain(ws, cat["exec_id"])
        assert stdout(events) == "ping\n"

        sleeper = await call("workspace_realtime_exec_start", workspace_id=ws, command="sleep 600")
        ended = await call(
            "workspace_realtime_exec_cancel", workspace_id=ws, exec_id=sleeper["exec_id"]
        )
        assert ended["state"] == "cancelled", ended
        _, last = await call.drain(ws, sleeper["exec_id"])
        assert last["state"] == "cancelled"

        await call("file_write", workspace_id=ws, path="hello/README.md", content="# changed\n")
        read = await call("file_read", workspace_id=ws, path="hello/README.md")
        assert read["content"] == "# changed\n"
        diff = await call("repo_diff", workspace_id=ws, destination="hello")
        assert "+# changed" in diff["diff"]

        bad = await call.error("file_read", workspace_id=ws, path="../../etc/passwd")
        assert (bad["code"], bad["field"]) == ("invalid_argument", "path")

        assert (await call("workspace_terminate", workspace_id=ws))["terminated"]
        gone = await call.error("workspace_get", workspace_id=ws)
        assert gone["code"] == "not_found"


class Progress:
    """The progress notifications one call received: (progress, message)."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, str | None]] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, message))


async def test_a_long_call_reports_progress(served: Served) -> None:
    on_progress = Progress()
    seen = on_progress.seen
    async with connect(served, "legacy") as client:
        call = Tools(client)
        ws = (await call("workspace_create"))["workspace_id"]
        result = await client.call_tool(
            "workspace_exec",
            {"workspace_id": ws, "command": "for i in 1 2 3; do echo step $i; sleep 1; done"},
            progress_callback=on_progress,
        )
        assert not result.is_error
        assert result.structured_content["stdout"] == "step 1\nstep 2\nstep 3\n"  # type: ignore[index]
        await call("workspace_terminate", workspace_id=ws)
    assert seen, "no progress notification arrived"
    assert any(message and message.startswith("step") for _, message in seen)


async def test_a_snapshot_reports_its_progress_and_lists_what_it_took(served: Served) -> None:
    on_progress = Progress()
    seen = on_progress.seen
    async with connect(served, "legacy") as client:
        call = Tools(client)
        ws = (await call("workspace_create"))["workspace_id"]
        make = "head -c 200000000 /dev/urandom > big.bin && echo made"
        assert (await call("workspace_exec", workspace_id=ws, command=make))["stdout"] == "made\n"
        result = await client.call_tool(
            "workspace_snapshot",
            {"workspace_id": ws, "label": "big"},
            progress_callback=on_progress,
        )
        assert not result.is_error, result.content
        snapshot = result.structured_content
        assert isinstance(snapshot, dict) and snapshot["label"] == "big"
        listed = await call("workspace_snapshot_list", workspace_id=ws)
        assert [s["snapshot_id"] for s in listed["snapshots"]] == [snapshot["snapshot_id"]]
        await call("workspace_terminate", workspace_id=ws, purge=True)
    assert seen, "no progress notification arrived"
    progress = [p for p, message in seen if message and message.startswith("snapshot")]
    assert progress == sorted(progress) and progress, seen
    if snapshot["size_bytes"] is not None:  # where the driver knows the size, progress ends at it
        assert snapshot["size_bytes"] >= 200_000_000
        assert progress[-1] == snapshot["size_bytes"]
