"""What a Modal user pays in control-plane round trips (on Modal each is a network call), counted
exactly so that a regression fails: creating a workspace, opening its channel, starting an exec
on an open channel, polling it; listing workspaces as they grow in number. Through the service
table with the real agent (or, for the list, a stand-in one), the real `modal` SDK against the
test control plane. docs/modal.md's table says the same."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_control_plane.isolation import usable_bwrap
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.base import WorkspaceSpec
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings
from modal_workspace_core.policy import new_id
from modal_workspace_core.surfaces.python_client import Workspaces

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

IMAGE = "round-trip-image"
ECHO_AGENT = Path(__file__).parent / "modal_control_plane" / "echo_agent.py"
# The calls on the task's command router that carry the channel's bytes.
BYTES = {"TaskExecStdinWrite"}


@pytest.fixture
async def workspaces(
    modal_control_plane: ControlPlane, tmp_path: Path
) -> AsyncIterator[Workspaces]:
    if not usable_bwrap():
        pytest.skip("bubblewrap does not work here (.ci/run installs it)")
    modal_control_plane.publish_image(IMAGE, "im-roundtripimage00000")
    settings = load_settings(
        {"MODAL_WORKSPACE_DRIVER": "modal", "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "data")}
    )
    driver = ModalDriver(ModalSettings(app_name="round-trips", default_image_name=IMAGE))
    async with Workspaces(driver, settings=settings) as wss:
        yield wss
    await driver.close()


def spent(plane: ControlPlane, before: Counter[str]) -> dict[str, int]:
    """The calls made since `before`, but the ones that carry the channel's bytes."""
    after = plane.calls()
    return {k: after[k] - before[k] for k in after if after[k] != before[k] and k not in BYTES}


async def test_the_calls_of_create_channel_open_exec_start_and_polls(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    plane = modal_control_plane
    before = plane.calls()
    ws = await workspaces.create()
    # The app once per process, the image by name, the sandbox, its launch configuration; and,
    # while the sandbox starts, the first version of its records in the state Volume (the
    # Volume once per process, the version and its block, the copy of the newest).
    assert spent(plane, before) == {
        "AuthTokenGet": 1,
        "AppGetOrCreate": 1,
        "ImageGetByTag": 1,
        "SandboxCreateV2": 1,
        "SandboxStdinWriteV2": 1,
        "VolumeGetOrCreate": 1,
        "VolumePutFiles2": 3,
        "BlockPut": 1,
    }

    before = plane.calls()
    assert (await ws.exec("true")).returncode == 0
    # The exec of `connect` on the handle the create kept (which knows its task and router
    # already), its record the create's: the exec and its output stream. From the create
    # request to the first byte of a command's output, four calls one after another once a
    # process has its app and image (`SandboxCreateV2`, `SandboxStdinWriteV2`, then these), the
    # records' Volume calls running beside the create.
    assert spent(plane, before) == {
        "TaskExecStart": 1,
        "TaskExecStdioRead": 1,
    }

    # A gateway that did not make it (restarted, or another container) looks it up: the record
    # (a lookup, its tags, and one miss in the Volume that shows the tags copy the newest
    # records), then the same four on the lookup's handle. Seven.
    await workspaces.service.drop_agent(ws.id)
    driver = workspaces.service.driver
    driver._handles.clear()  # type: ignore[attr-defined]
    before = plane.calls()
    assert (await ws.exec("true")).returncode == 0
    assert spent(plane, before) == {
        "SandboxGetFromNameV2": 1,
        "SandboxTagsGetV2": 1,
        "VolumeGetFile2": 1,
        "SandboxGetTaskIdV2": 1,
        "SandboxGetCommandRouterAccess": 1,
        "TaskExecStart": 1,
        "TaskExecStdioRead": 1,
    }

    before = plane.calls()
    assert (await ws.exec("true")).returncode == 0
    started = await workspaces.call(
        "workspace_realtime_exec_start", workspace_id=ws.id, command="sleep 30"
    )
    exec_id = started.model_dump()["exec_id"]
    for _ in range(100):
        await workspaces.call("stream_events", workspace_id=ws.id, stream_id=exec_id)
    # On an open channel: bytes, and nothing else.
    assert spent(plane, before) == {}


async def test_listing_fifty_workspaces_costs_what_listing_one_does(
    modal_control_plane: ControlPlane,
) -> None:
    modal_control_plane.publish_image(IMAGE, "im-roundtripimage00000")
    driver = ModalDriver(
        ModalSettings(
            app_name="round-trip-list",
            default_image_name=IMAGE,
            agent_command=(sys.executable, str(ECHO_AGENT)),
        )
    )
    try:
        costs = []
        made = 0
        for count in (1, 50):
            while made < count:
                await driver.create(new_id("ws"), WorkspaceSpec())
                made += 1
            before = modal_control_plane.calls()
            listed = await driver.list()
            costs.append(spent(modal_control_plane, before))
            assert len(listed) == count
        assert costs[0] == costs[1], costs
        assert "SandboxTagsGetV2" not in costs[1], "no read per workspace"
    finally:
        await driver.close()


async def test_an_exec_sent_while_the_container_starts_waits_for_it(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    modal_control_plane.start_delay(3)
    ws = await workspaces.create()
    # At once: the container has no task yet, then its daemon is not listening yet.
    result = await ws.exec("echo started")
    assert (result.returncode, result.stdout) == (0, "started\n")
    # One exec of `connect` (it waits for the daemon's socket itself), not one per retry.
    sandbox = next(s for s in modal_control_plane.sandboxes() if s.name == ws.id)
    assert sum("connect" in e.argv for e in sandbox.execs.values()) == 1


async def test_the_sweep_leaves_idleness_to_modal_and_opens_no_channel(
    modal_control_plane: ControlPlane, tmp_path: Path
) -> None:
    from modal_workspace_core.janitor import Janitor

    modal_control_plane.publish_image(IMAGE, "im-roundtripimage00000")
    settings = load_settings(
        {
            "MODAL_WORKSPACE_DRIVER": "modal",
            "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "data"),
            "MODAL_WORKSPACE_JANITOR_SECONDS": "0",
        }
    )
    driver = ModalDriver(
        ModalSettings(
            app_name="round-trip-sweep",
            default_image_name=IMAGE,
            agent_command=(sys.executable, str(ECHO_AGENT)),
        )
    )
    async with Workspaces(driver, settings=settings) as wss:
        ws = await wss.create(resources={"idle_timeout_seconds": 60})
        before = modal_control_plane.calls()
        await Janitor(wss.service).sweep()
        swept = spent(modal_control_plane, before)
        # A channel would keep the sandbox active and so never idle: Modal's own idle timeout
        # ends it (with its exit snapshot), whichever gateway served it last.
        assert "TaskExecStart" not in swept, swept
        assert (await ws.refresh()).state == "running"
    await driver.close()


async def test_the_calls_of_each_journey_once_a_process_is_warm(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    """The table of docs/modal.md: a create and its first output, a snapshot, a fork, a
    resume, each counted in a process that has its app, image and Volume already."""
    plane = modal_control_plane
    warm = await workspaces.create()
    assert (await warm.exec("true")).returncode == 0

    before = plane.calls()
    ws = await workspaces.create()
    assert (await ws.exec("echo hi")).stdout == "hi\n"
    journeys = {"create, then its first output": spent(plane, before)}

    before = plane.calls()
    snapshot = await workspaces.call("workspace_snapshot", workspace_id=ws.id)
    journeys["snapshot"] = spent(plane, before)

    before = plane.calls()
    await workspaces.call(
        "workspace_fork", workspace_id=ws.id, snapshot_id=snapshot.model_dump()["snapshot_id"]
    )
    journeys["fork of a snapshot"] = spent(plane, before)

    before = plane.calls()
    await workspaces.call("workspace_resume", workspace_id=ws.id)
    journeys["resume of a running workspace from its latest snapshot"] = spent(plane, before)

    # docs/modal.md's table: each operation looks its workspace up once (a lookup, its tags and
    # the Volume's miss), whatever steps it takes.
    assert journeys == {
        "create, then its first output": {
            "ImageGetByTag": 1,
            "SandboxCreateV2": 1,
            "SandboxStdinWriteV2": 1,
            "VolumePutFiles2": 3,
            "BlockPut": 1,
            "TaskExecStart": 1,
            "TaskExecStdioRead": 1,
        },
        "snapshot": {
            "SandboxGetFromNameV2": 1,
            "SandboxTagsGetV2": 1,
            "VolumeGetFile2": 3,
            "BlockGet": 1,
            "SandboxGetTaskIdV2": 1,
            "SandboxGetCommandRouterAccess": 1,
            "TaskSnapshotFilesystem": 1,
            "ImageFromId": 1,
            "VolumePutFiles2": 3,
            "BlockPut": 1,
            "SandboxTagsSetV2": 1,
        },
        "fork of a snapshot": {
            "SandboxGetFromNameV2": 1,
            "SandboxTagsGetV2": 1,
            "VolumeGetFile2": 1,
            "ImageFromId": 2,
            "SandboxCreateV2": 1,
            "SandboxStdinWriteV2": 1,
            "VolumePutFiles2": 3,
            "BlockPut": 1,
        },
        "resume of a running workspace from its latest snapshot": {
            "SandboxGetFromNameV2": 1,
            "SandboxTagsGetV2": 1,
            "VolumeGetFile2": 5,
            "BlockGet": 2,
            "ImageFromId": 2,
            "SandboxTerminateV2": 1,
            "SandboxWaitV2": 1,
            "VolumePutFiles2": 6,
            "BlockPut": 2,
            "SandboxTagsSetV2": 1,
            "SandboxCreateV2": 1,
            "SandboxStdinWriteV2": 1,
            "TaskExecStart": 1,
            "TaskExecStdioRead": 1,
        },
    }, journeys
