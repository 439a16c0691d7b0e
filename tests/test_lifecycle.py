"""The lifecycle when nobody calls, end to end: `modal-workspace serve` on the local driver with
its sweep every second, real agents, REST and the official MCP client. A workspace past its
lifetime or idle limit is suspended with a snapshot and nothing of it lost; the next operation
resumes it and says so; expired snapshots are deleted and the workspace says that too."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from e2e_support import Served, api_client, local_backend, ok, serve
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from service_support import TOKEN

pytest.importorskip("modal_workspace_core.drivers.local.driver")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with local_backend(tmp_path, "ghp_unused") as backend:
        # A sweep every second, and a safety snapshot 3 s before a lifetime ends.
        env = {
            **backend.env,
            "MODAL_WORKSPACE_JANITOR_SECONDS": "1",
            "MODAL_WORKSPACE_SAFETY_MARGIN_SECONDS": "3",
        }
        with serve(tmp_path, "", dataclasses.replace(backend, env=env)) as served:
            yield served


@pytest.fixture
def api(served: Served) -> Iterator[httpx2.Client]:
    with api_client(served) as client:
        yield client


def until(what: str, check: Callable[[], Any], within: float = 60) -> Any:
    deadline = time.monotonic() + within
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} did not happen within {within} s"
        time.sleep(0.25)
    return found


def suspended(api: httpx2.Client, ws: str) -> dict[str, Any]:
    return until(
        f"{ws} suspended",
        lambda: (w := ok(api.get(f"/workspaces/{ws}")))["state"] == "suspended" and w,
    )


def test_past_its_lifetime_a_workspace_is_suspended_with_its_files_and_resumes(
    api: httpx2.Client,
) -> None:
    ws = ok(api.post("/workspaces", json={"resources": {"timeout_seconds": 6}}))["workspace_id"]
    written = ok(
        api.post(f"/workspaces/{ws}/exec", json={"command": "echo kept > work.txt && echo ok"})
    )
    assert written["stdout"] == "ok\n"
    got = suspended(api, ws)
    assert got["suspension"]["reason"] == "lifetime"
    kinds = [s["kind"] for s in ok(api.get(f"/workspaces/{ws}/snapshots"))["snapshots"]]
    assert kinds == ["safety", "exit"], kinds
    assert (
        got["suspension"]["snapshot_id"]
        == ok(api.get(f"/workspaces/{ws}/snapshots"))["snapshots"][-1]["snapshot_id"]
    )
    # The sweep notes the suspension just after it suspends.
    noted = until(
        f"{ws}'s suspension noted",
        lambda: (
            (w := ok(api.get(f"/workspaces/{ws}")))["lifecycle"][-1:]
            and w["lifecycle"][-1]["action"] == "suspended"
            and w
        ),
    )
    actions = [n["action"] for n in noted["lifecycle"]]
    assert actions == ["snapshot", "suspended"], noted["lifecycle"]

    resumed = ok(api.post(f"/workspaces/{ws}/resume", json={}))
    assert (
        resumed["state"] == "running"
        and resumed["resumed_from"] == got["suspension"]["snapshot_id"]
    )
    read = ok(api.get(f"/workspaces/{ws}/files/content", params={"path": "work.txt"}))
    assert read["content"] == "kept\n"


def test_an_idle_workspace_is_suspended_and_the_next_call_resumes_it_through_rest_and_mcp(
    api: httpx2.Client, served: Served
) -> None:
    body = {"resources": {"idle_timeout_seconds": 5}}
    ws = ok(api.post("/workspaces", json=body))["workspace_id"]
    ok(api.put(f"/workspaces/{ws}/files/content", json={"path": "a.txt", "content": "one\n"}))
    # A running command is use, however quiet: the workspace is not idle while it runs.
    ok(api.post(f"/workspaces/{ws}/exec", json={"command": "sleep 7"}))
    assert ok(api.get(f"/workspaces/{ws}"))["state"] == "running"

    first = suspended(api, ws)
    assert first["suspension"]["reason"] == "idle"
    # REST: the call that needs the workspace resumes it first, and says so.
    ran = ok(api.post(f"/workspaces/{ws}/exec", json={"command": "cat a.txt"}))
    assert ran["stdout"] == "one\n" and ran["resumed_from"] == first["suspension"]["snapshot_id"]
    assert ok(api.get(f"/workspaces/{ws}"))["state"] == "running"
    # A call that did not have to resume says nothing of it.
    assert "resumed_from" not in ok(api.post(f"/workspaces/{ws}/exec", json={"command": "true"}))

    second = suspended(api, ws)
    assert second["suspension"]["snapshot_id"] != first["suspension"]["snapshot_id"]
    # MCP: the same, through the official client.
    result = _mcp_call(served, "file_read", {"workspace_id": ws, "path": "a.txt"})
    assert result["content"] == "one\n"
    assert result["resumed_from"] == second["suspension"]["snapshot_id"]


def _mcp_call(served: Served, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """One tool call through the official MCP client; its structured output."""

    async def call() -> dict[str, Any]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
        async with Client(streamable_http_client(f"{served.base_url}/mcp/", http_client=http)) as c:
            result = await c.call_tool(tool, args)
            assert not result.is_error, result.content
            assert isinstance(result.structured_content, dict)
            return result.structured_content

    return asyncio.run(call())


def test_an_expired_snapshot_is_deleted_by_the_sweep_and_the_workspace_says_so(
    api: httpx2.Client, served: Served
) -> None:
    ws = ok(api.post("/workspaces", json={}))["workspace_id"]
    kept = ok(api.post(f"/workspaces/{ws}/snapshots", json={}))
    expiring = ok(api.post(f"/workspaces/{ws}/snapshots", json={"ttl_seconds": 3600}))
    record = served.data_root / "snapshots" / ws / expiring["snapshot_id"] / "record.json"
    data = json.loads(record.read_text())
    data["expires_at"] = "2000-01-01T00:00:00Z"  # time passes
    record.write_text(json.dumps(data))

    def listed() -> list[str]:
        return [s["snapshot_id"] for s in ok(api.get(f"/workspaces/{ws}/snapshots"))["snapshots"]]

    def notes() -> list[dict[str, str]]:
        return list(ok(api.get(f"/workspaces/{ws}"))["lifecycle"])

    # The sweep deletes the snapshot, then writes its note: wait for both.
    until("the expired snapshot deleted", lambda: listed() == [kept["snapshot_id"]] and notes())
    notes_now = notes()
    assert [n["action"] for n in notes_now] == ["snapshot_deleted"]
    assert expiring["snapshot_id"] in notes_now[0]["detail"]
    with contextlib.suppress(FileNotFoundError):
        assert not record.exists()


def test_a_terminated_workspace_is_purged_after_its_retention(tmp_path: Path) -> None:
    with local_backend(tmp_path, "ghp_unused") as backend:
        env = {
            **backend.env,
            "MODAL_WORKSPACE_JANITOR_SECONDS": "1",
            "MODAL_WORKSPACE_RETENTION_SECONDS": "2",
        }
        with (
            serve(tmp_path, "", dataclasses.replace(backend, env=env)) as served,
            api_client(served) as api,
        ):
            ws = ok(api.post("/workspaces", json={}))["workspace_id"]
            ended = ok(api.request("DELETE", f"/workspaces/{ws}", params={"keep_snapshot": True}))
            assert ended["snapshot_id"]
            snapshots = served.data_root / "snapshots" / ws
            assert (served.data_root / ws).is_dir() and snapshots.is_dir()
            # Resumable until its retention ends; then nothing of it is left.
            until("the purge", lambda: not (served.data_root / ws).exists(), within=30)
            assert not snapshots.exists()
            gone = api.post(f"/workspaces/{ws}/resume", json={})
            assert gone.status_code == 404, gone.text
            assert f"lifecycle: {ws} purged" in served.log_text()
