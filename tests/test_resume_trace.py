"""A resume leaves a trace (issue: a workspace that timed out under a running command was
resumed by the next read of its events, and `workspace_get` then said nothing of it). Whatever
resumed it, the workspace's `lifecycle` says when and why it ended, the snapshot it came back
from and the execs that were running then (lost); the answer of the call that resumed it names
that snapshot (`resumed_from`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import modal_workspace_core as mwc
import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_proto import api_pb2
from modal_service_support import (
    allowed_secrets,
    idle_seconds,
    needs_container_paths,
    workspaces,
)
from modal_workspace_core.config import Settings, load_settings
from modal_workspace_core.drivers.base import LifecycleNote
from modal_workspace_core.operations.lifecycle import take_snapshot

__all__ = ["allowed_secrets", "idle_seconds", "modal_control_plane", "workspaces"]


async def resumed_note(ws: mwc.Workspace, within: float = 30) -> LifecycleNote:
    """The workspace's note of its resume, once there (a resume a call needed is noted in the
    background: the call holds the workspace's channel meanwhile)."""
    for _ in range(int(within / 0.2)):
        notes = (await ws.refresh()).lifecycle
        found = [n for n in notes if n.action == "resumed"]
        if found:
            return found[-1]
        await asyncio.sleep(0.2)
    raise AssertionError(f"no resume noted on {ws.workspace_id}: {notes}")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(
        {
            "MODAL_WORKSPACE_MCP_TOKEN": "resume-token-0123456789",
            "MODAL_WORKSPACE_JANITOR_SECONDS": "0",
        },
        data_root=tmp_path / "data",
    )


@pytest.fixture
async def local(settings: Settings) -> AsyncIterator[mwc.Workspaces]:
    async with mwc.Workspaces(settings=settings) as wss:
        yield wss


async def test_a_suspended_workspace_a_call_resumes_says_why_and_what_was_lost(
    local: mwc.Workspaces,
) -> None:
    async with local.create() as ws:
        running = await ws.realtime_exec_start("sleep 600")
        # What the sweep does at the end of a lifetime: a snapshot, then nothing runs.
        svc = local.service
        snapshot = await take_snapshot(svc, ws.workspace_id, "exit")
        await svc.drop_agent(ws.workspace_id)
        await svc.driver.suspend(ws.workspace_id, "lifetime", snapshot.snapshot_id)

        answer = await ws.exec("echo back")
        assert answer.stdout == "back\n" and answer.resumed_from == snapshot.snapshot_id
        note = await resumed_note(ws)
        assert note.snapshot_id == snapshot.snapshot_id
        assert note.lost_execs == [running.exec_id]
        assert "(lifetime)" in note.detail and running.exec_id in note.detail
        assert (await ws.realtime_exec_status(running.exec_id)).state == "lost"


async def test_an_explicit_resume_answers_with_its_trace(local: mwc.Workspaces) -> None:
    async with local.create() as ws:
        await ws.exec("echo kept > notes.txt")
        ended = await local.call(
            "workspace_terminate", workspace_id=ws.workspace_id, keep_snapshot=True
        )
        resumed = await local.call("workspace_resume", workspace_id=ws.workspace_id)
        assert resumed.resumed_from == ended.snapshot_id
        (note,) = [n for n in resumed.lifecycle if n.action == "resumed"]
        assert note.snapshot_id == ended.snapshot_id and note.lost_execs == []
        assert "(terminated)" in note.detail and "no command was running" in note.detail


@needs_container_paths
async def test_a_modal_sandbox_that_timed_out_under_a_command_is_resumed_with_a_trace(
    workspaces: mwc.Workspaces, modal_control_plane: ControlPlane
) -> None:
    ws = await workspaces.create()
    running = await ws.realtime_exec_start("sleep 600")
    sandbox = next(
        s for s in modal_control_plane.sandboxes() if s.name == ws.workspace_id and s.running
    )
    modal_control_plane.end_sandbox(
        sandbox.sandbox_id, api_pb2.GenericResult.GENERIC_STATUS_TIMEOUT
    )
    # The next read of the command's events resumes it from its exit snapshot (the dead
    # channel's retry finds it suspended), says so, and reads the command as lost.
    page = await ws.realtime_exec_events(running.exec_id, cursor=0, wait_seconds=5)
    assert page.done and page.state == "lost" and page.resumed_from is not None
    note = await resumed_note(ws)
    assert note.snapshot_id == page.resumed_from and note.lost_execs == [running.exec_id]
    assert "(lifetime)" in note.detail
    got = await ws.refresh()
    assert got.state == "running" and got.lifecycle[-1].action == "resumed"


async def test_a_forged_exec_list_names_only_well_formed_execs() -> None:
    """The resumed agent's list is the workspace's own data: a command can write the agent's
    records. The note keeps only exec ids of the right shape, never a forged text."""
    from types import SimpleNamespace

    from modal_workspace_core.drivers.base import Suspension, WorkspaceRecord
    from modal_workspace_core.operations.lifecycle import Resumed, note_resume

    real = "ex-" + "a" * 32
    forged = [
        {"exec_id": real, "state": "lost", "started_at": "2026-12-03T00:00:01Z"},
        {"exec_id": "x" * 100_000, "state": "lost", "started_at": "2026-12-03T00:00:01Z"},
        {"exec_id": "ex-" + "b" * 32, "state": "lost", "started_at": "2026-12-03T00:00:01"},
        "not a record",
    ]
    noted: list[LifecycleNote] = []

    async def request(*_: object) -> tuple[dict[str, object], bytes]:
        return {"execs": forged}, b""

    async def note(_: str, written: LifecycleNote) -> None:
        noted.append(written)

    svc = SimpleNamespace(request=request, driver=SimpleNamespace(note=note))
    before = WorkspaceRecord(
        workspace_id="ws-" + "c" * 32,
        driver="local",
        root="/workspace",
        created_at="2026-12-03T00:00:00Z",
        tags={},
        state="suspended",
        started_at="2026-12-03T00:00:00Z",
        suspension=Suspension(reason="lifetime", at="2026-12-03T00:00:02Z"),
    )
    snapshot = SimpleNamespace(snapshot_id="sn-" + "d" * 32)
    await note_resume(svc, Resumed(before, snapshot))  # type: ignore[arg-type]
    (written,) = noted
    assert written.lost_execs == [real, "ex-" + "b" * 32]
    assert len(written.detail) < 400
