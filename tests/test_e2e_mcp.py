"""End to end through the official MCP client over real HTTP: `modal-workspace serve` on
127.0.0.1 with the real agent, on the local driver and on the Modal driver against the test
control plane; create, clone, a realtime exec with stdin and cancel followed by the cursor loop,
files, diff, terminate — in both protocol generations."""

from __future__ import annotations

import base64
import itertools
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
    rising(seen)
    progress = [p for p, message in seen if message and message.startswith("snapshot")]
    if snapshot["size_bytes"] is not None:  # where the driver knows the size, progress ends at it
        assert snapshot["size_bytes"] >= 200_000_000
        # (a last report that says the same as the one before rises by the least a float can)
        assert progress[-1] == pytest.approx(snapshot["size_bytes"], abs=1)


def rising(seen: list[tuple[float, str | None]]) -> None:
    """MCP asks each progress value of a call to be above the one before."""
    values = [p for p, _ in seen]
    assert all(a < b for a, b in itertools.pairwise(values)), seen


async def test_a_fork_reports_the_snapshot_it_takes_and_its_start(served: Served) -> None:
    on_progress = Progress()
    async with connect(served, "legacy") as client:
        call = Tools(client)
        ws = (await call("workspace_create"))["workspace_id"]
        make = "head -c 20000000 /dev/urandom > big.bin && echo made"
        assert (await call("workspace_exec", workspace_id=ws, command=make))["stdout"] == "made\n"
        result = await client.call_tool(
            "workspace_fork", {"workspace_id": ws}, progress_callback=on_progress
        )
        assert not result.is_error, result.content
        fork = result.structured_content
        assert isinstance(fork, dict)
        snapshot = fork["lineage"]["snapshot_id"]
        for each in (fork["workspace_id"], ws):
            await call("workspace_terminate", workspace_id=each, purge=True)
    messages = [m or "" for _, m in on_progress.seen]
    # The snapshot first, then the fork's start from it, in one rising count.
    assert messages[0] == f"snapshot: taking {snapshot}", messages
    assert f"fork: starting {fork['workspace_id']} from {snapshot}" in messages
    assert messages[-1] == f"fork: {fork['workspace_id']} started"
    starting = messages.index(f"fork: starting {fork['workspace_id']} from {snapshot}")
    assert all(m.startswith("snapshot:") for m in messages[:starting]), messages
    rising(on_progress.seen)


async def test_a_template_build_reports_its_setup_and_its_snapshot(served: Served) -> None:
    on_progress = Progress()
    setup = "for i in 1 2 3; do echo setting up $i; sleep 1; done"
    async with connect(served, "legacy") as client:
        result = await client.call_tool(
            "template_create",
            {
                "name": "progress",
                "repository": "octo/hello",
                "setup_command": setup,
                "use_github_token": True,
                "wait_seconds": 40,
            },
            progress_callback=on_progress,
        )
        assert not result.is_error, result.content
        assert result.structured_content is not None
        assert result.structured_content["state"] == "ready", result.structured_content
        deleted = await client.call_tool("template_delete", {"name": "progress"})
        assert not deleted.is_error, deleted.content
    messages = [m or "" for _, m in on_progress.seen]
    # The setup's lines as they come, then the build's snapshot.
    assert any(m.startswith("setting up") for m in messages), messages
    setting_up = max(i for i, m in enumerate(messages) if m.startswith("setting up"))
    assert any(m.startswith("snapshot:") for m in messages[setting_up:]), messages
    rising(on_progress.seen)
