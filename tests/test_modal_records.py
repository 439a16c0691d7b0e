"""A Modal workspace's records are kept in the deployment's state Volume, not only in its
sandbox's tags (`drivers/modal/workspace_records.py`): two gateway processes writing one
workspace's records at once lose nothing; a workspace whose ended sandboxes Modal no longer lists
is still found, listed and resumed; a workspace recorded only in tags (made before) is moved
into the store at its first read."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_service_support import IMAGE, needs_container_paths
from modal_workspace_core.drivers.base import LifecycleNote, SnapshotSpec, WorkspaceSpec
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings
from modal_workspace_core.drivers.modal.workspace_records import FOLDER
from modal_workspace_core.policy import new_id

__all__ = ["modal_control_plane"]

ECHO_AGENT = Path(__file__).parent / "modal_control_plane" / "echo_agent.py"
NOTES_EACH = 8

# One gateway process: notes the workspace NOTES_EACH times, as fast as it can.
_WRITER = """
import asyncio, sys
from modal_workspace_core.drivers.base import LifecycleNote
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings

async def main(ws, me, count):
    driver = ModalDriver(ModalSettings(app_name="records-tests"))
    for i in range(int(count)):
        await driver.note(ws, LifecycleNote(at="2026-12-03T00:00:00Z", action="snapshot",
                                            detail=f"{me}-{i}"))
    await driver.close()

asyncio.run(main(*sys.argv[1:4]))
"""


def _settings() -> ModalSettings:
    return ModalSettings(
        app_name="records-tests",
        default_image_name=IMAGE,
        agent_command=(sys.executable, str(ECHO_AGENT)),
    )


@pytest.fixture
async def driver(modal_control_plane: ControlPlane):  # type: ignore[no-untyped-def]
    modal_control_plane.publish_image(IMAGE, "im-recordstestimage0000")
    driver = ModalDriver(_settings())
    yield driver
    await driver.close()


def _spec() -> SnapshotSpec:
    return SnapshotSpec(snapshot_id=new_id("sn"), kind="manual", label="kept")


async def test_two_gateway_processes_noting_one_workspace_at_once_lose_nothing(
    driver: ModalDriver,
) -> None:
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec())
    writers = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WRITER, ws, me, str(NOTES_EACH), stderr=subprocess.PIPE
        )
        for me in ("left", "right")
    ]
    for writer in writers:
        _, err = await writer.communicate()
        assert writer.returncode == 0, err.decode()[-2000:]
    details = sorted(n.detail for n in (await driver.get(ws)).lifecycle)
    expected = sorted(f"{me}-{i}" for me in ("left", "right") for i in range(NOTES_EACH))
    assert details == expected


async def test_a_workspace_modal_no_longer_lists_is_found_listed_and_resumed(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec(tags={"team": "a"}))
    snapshot = await driver.snapshot(ws, _spec())
    await driver.suspend(ws, "idle", snapshot.snapshot_id)
    kept = new_id("ws")
    await driver.create(kept, WorkspaceSpec())
    kept_snapshot = await driver.snapshot(kept, _spec())
    await driver.destroy(kept, keep_snapshots=True)
    assert modal_control_plane.forget_ended_sandboxes() >= 2

    got = await driver.get(ws)
    assert got.state == "suspended" and got.suspension is not None
    assert got.suspension.snapshot_id == snapshot.snapshot_id and got.tags["team"] == "a"
    assert [s.snapshot_id for s in await driver.list_snapshots(ws)] == [snapshot.snapshot_id]
    listed = {r.workspace_id: r.state for r in await driver.list()}
    assert listed[ws] == "suspended" and listed[kept] == "terminated"
    assert [s.snapshot_id for s in await driver.list_snapshots(kept)] == [kept_snapshot.snapshot_id]

    resumed = await driver.resume(ws, snapshot)
    assert resumed.state == "running" and resumed.tags["team"] == "a"
    assert (await driver.get(ws)).state == "running"
    # Purged, it reads as never made, whatever Modal lists.
    await driver.destroy(kept, keep_snapshots=False)
    assert kept not in {r.workspace_id for r in await driver.list()}


async def test_a_workspace_recorded_only_in_tags_is_moved_into_the_store_once(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec())
    snapshot = await driver.snapshot(ws, _spec())
    # As a gateway before the store left it: records in its tags alone.
    await driver.shared_store.remove(f"{FOLDER}/{ws}")
    sandbox = next(s for s in modal_control_plane.sandboxes() if s.name == ws and s.running)
    modal_control_plane.call(
        lambda: sandbox.tags.pop("mwc-version", None)  # type: ignore[arg-type]
    )

    assert [s.snapshot_id for s in await driver.list_snapshots(ws)] == [snapshot.snapshot_id]
    stored = modal_control_plane.volume_files("modal-workspace-state")
    assert f"{FOLDER}/{ws}/v/0000000001" in stored and f"{FOLDER}/{ws}/record" in stored
    assert f"mwc-sn-{snapshot.snapshot_id[3:]}".encode() in stored[f"{FOLDER}/{ws}/record"]


@needs_container_paths
async def test_the_records_survive_a_real_agents_workspace_too(
    modal_control_plane: ControlPlane,
) -> None:
    """With the real agent: a note written, the sandbox forgotten, the note still there."""
    modal_control_plane.publish_image(IMAGE, "im-recordstestimage0000")
    driver = ModalDriver(ModalSettings(app_name="records-real", default_image_name=IMAGE))
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec())
    await driver.note(ws, LifecycleNote(at="2026-12-03T00:00:00Z", action="snapshot", detail="x"))
    await driver.destroy(ws, keep_snapshots=True)
    modal_control_plane.forget_ended_sandboxes()
    got = await driver.get(ws)
    assert got.state == "terminated" and [n.detail for n in got.lifecycle] == ["x"]
    await driver.close()
