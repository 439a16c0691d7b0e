"""GPU workspaces on the Modal driver, through the service table (the operations REST, MCP and the
Python API share), with the real SDK and the real agent against the test control plane: a GPU
the operator allows becomes a V1 sandbox (the SDK makes GPU sandboxes through its V1 calls) that
lives its whole life there; one the allowlist does not cover, or a request Modal would refuse,
never reaches Modal at all."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_service_support import needs_container_paths
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.base import SnapshotSpec, WorkspaceSpec
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings
from modal_workspace_core.errors import (
    InvalidArgumentError,
    PermissionDeniedError,
    WorkspaceError,
)
from modal_workspace_core.policy import GPU_TYPES, new_id
from modal_workspace_core.surfaces.python_client import Workspaces

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

# The agent's protocol carries container paths (`/workspace`): sandboxes must see them.
pytestmark = needs_container_paths

IMAGE = "gpu-test-image"
GPUS = "MODAL_WORKSPACE_ALLOWED_GPUS"
# What a GPU workspace's life makes of the SDK's V1 sandbox calls (`modal/sandbox/_impl_v1.py`).
V1_CALLS = (
    "SandboxCreate",
    "SandboxStdinWrite",
    "SandboxGetTaskId",
    "TaskGetCommandRouterAccess",
    "SandboxGetFromName",
    "SandboxTagsGet",
    "SandboxTagsSet",
    "SandboxTerminate",
    "SandboxWait",
)
# Their V2 counterparts, which it never makes. (`SandboxGetFromNameV2` is asked first by name
# whatever the sandbox, and `SandboxListV2` lists V1 sandboxes too: both are expected.)
V2_SANDBOX_CALLS = (
    "SandboxCreateV2",
    "SandboxStdinWriteV2",
    "SandboxGetTaskIdV2",
    "SandboxGetCommandRouterAccess",
    "SandboxTagsGetV2",
    "SandboxTagsSetV2",
    "SandboxTerminateV2",
    "SandboxWaitV2",
)


@pytest.fixture
def allowed_gpus() -> str:
    return "T4,H100:2"


def _modal_settings(allowed_gpus: str, **overrides: object) -> ModalSettings:
    """The driver's settings as the gateway reads them, the GPU allowlist among them."""
    modal = load_settings({GPUS: allowed_gpus}, driver="modal").modal
    assert modal is not None
    modal = replace(modal, app_name="gpu-tests", default_image_name=IMAGE)
    return replace(modal, **overrides)  # type: ignore[arg-type]


@pytest.fixture
async def driver(
    modal_control_plane: ControlPlane, allowed_gpus: str
) -> AsyncIterator[ModalDriver]:
    modal_control_plane.publish_image(IMAGE, "im-gputestimage000000000")
    driver = ModalDriver(_modal_settings(allowed_gpus))
    yield driver
    await driver.close()


@pytest.fixture
async def workspaces(
    driver: ModalDriver, tmp_path: Path, allowed_gpus: str
) -> AsyncIterator[Workspaces]:
    settings = load_settings(
        {
            "MODAL_WORKSPACE_DRIVER": "modal",
            "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "data"),
            GPUS: allowed_gpus,
        }
    )
    async with Workspaces(driver, settings=settings) as wss:
        yield wss


async def test_an_allowed_gpu_workspace_lives_its_whole_life_on_the_v1_calls(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    ws = await workspaces.create(resources={"gpu": "h100:2"})
    assert ws.info.resources["gpu"] == "H100:2"  # canonical, as Modal writes it

    result = await ws.exec("echo on the gpu; pwd")
    assert result.stdout == "on the gpu\n/workspace\n"
    await ws.file_write("model.txt", "weights\n")
    snapshot = await ws.snapshot(label="trained")
    assert ws.id in [w.id for w in await workspaces.list()]
    # A resume of a running workspace ends its sandbox (terminate, wait) and starts another
    # from the snapshot with the recorded GPU.
    await ws.resume(snapshot_id=snapshot.snapshot_id)
    assert (await ws.exec("cat model.txt")).stdout == "weights\n"
    await ws.terminate()

    first, second = sorted(modal_control_plane.sandboxes(), key=lambda s: s.created_at)
    for sandbox in (first, second):
        gpu = sandbox.definition.resources.gpu_config
        assert (gpu.gpu_type, gpu.count) == ("H100", 2)
        assert not sandbox.running
    calls = modal_control_plane.calls()
    assert {name: calls[name] for name in V1_CALLS if calls[name] == 0} == {}
    assert calls["SandboxCreate"] == 2
    assert calls["TaskSnapshotFilesystem"] == 2  # the one asked for, and the terminate's
    assert {name: calls[name] for name in V2_SANDBOX_CALLS if calls[name]} == {}
    assert modal_control_plane.unimplemented == []


@pytest.mark.parametrize(
    ("allowed_gpus", "gpu", "refusal", "says"),
    [
        ("T4,H100:2", "A100", PermissionDeniedError, "allows T4 (up to 8), H100 (up to 2)"),
        ("T4,H100:2", "A100-80GB:2", PermissionDeniedError, "not allowed"),
        ("T4,H100:2", "h100:3", PermissionDeniedError, "at most 2 H100"),
        ("", "T4", PermissionDeniedError, "no GPU is allowed here: an operator lists the types"),
        ("T4,H100:2", "T4:9", InvalidArgumentError, "from 1 to 8 for T4"),
        ("T4,H100:2", "T4:0", InvalidArgumentError, "from 1 to 8 for T4"),
        ("T4,H100:2", "V100", InvalidArgumentError, "Modal's types T4, L4, A10"),
    ],
)
@pytest.mark.parametrize("idempotency_key", [None, "retry-safe"])
async def test_a_gpu_off_the_allowlist_or_modals_bounds_is_refused_before_any_modal_call(
    workspaces: Workspaces,
    modal_control_plane: ControlPlane,
    gpu: str,
    refusal: type[WorkspaceError],
    says: str,
    idempotency_key: str | None,
) -> None:
    before = modal_control_plane.calls()

    with pytest.raises(refusal) as refused:
        await workspaces.create(resources={"gpu": gpu}, idempotency_key=idempotency_key)

    assert refused.value.field == "resources.gpu"
    assert says in refused.value.message
    if refusal is PermissionDeniedError:
        assert GPUS in refused.value.message
    # Not even the idempotency key's lookup: nothing reached the control plane.
    assert modal_control_plane.calls() == before
    assert modal_control_plane.sandboxes() == []


@pytest.mark.parametrize("allowed_gpus", [""])
async def test_an_empty_allowlist_refuses_every_gpu_in_the_driver_too(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    before = modal_control_plane.calls()

    for name, _ in GPU_TYPES:
        spec = WorkspaceSpec(resources={"gpu": name})
        with pytest.raises(PermissionDeniedError) as refused:
            await driver.create(new_id("ws"), spec)
        assert refused.value.field == "resources.gpu"

    assert modal_control_plane.calls() == before


async def test_a_template_with_a_gpu_off_the_allowlist_is_refused_before_it_is_stored(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    before = modal_control_plane.calls()

    with pytest.raises(PermissionDeniedError) as refused:
        await workspaces.call(
            "template_create", name="trainer", repository="octo/hello", resources={"gpu": "B200"}
        )

    assert refused.value.field == "resources.gpu"
    assert modal_control_plane.calls() == before


async def test_a_fork_of_a_gpu_workspace_gets_its_gpu(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    parent = await workspaces.create(resources={"gpu": "T4"})
    await parent.file_write("data.txt", "parent's\n")

    fork = await parent.fork()

    assert fork.resources["gpu"] == "T4"
    child = next(s for s in modal_control_plane.sandboxes() if s.name == fork.workspace_id)
    assert child.definition.resources.gpu_config.gpu_type == "T4"
    assert modal_control_plane.calls()["SandboxCreate"] == 2


async def test_a_resume_after_the_operator_took_the_gpu_off_the_allowlist_ends_nothing(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec(resources={"gpu": "T4"}))
    snapshot = await driver.snapshot(ws, SnapshotSpec(snapshot_id=new_id("sn")))
    restarted = ModalDriver(_modal_settings(""))  # the same deployment, no GPU allowed now
    before = modal_control_plane.calls()

    try:
        with pytest.raises(PermissionDeniedError) as refused:
            await restarted.resume(ws, snapshot)
    finally:
        await restarted.close()

    assert refused.value.field == "resources.gpu"
    made = modal_control_plane.calls() - before
    assert made["SandboxTerminate"] == made["SandboxCreate"] == 0
    assert (await driver.get(ws)).state == "running"


async def test_a_gpu_workspace_that_fails_to_start_says_why(
    modal_control_plane: ControlPlane, allowed_gpus: str
) -> None:
    modal_control_plane.publish_image(IMAGE, "im-gputestimage000000000")
    # An agent that reads its launch configuration, complains and exits.
    failing = (
        sys.executable,
        "-c",
        "import sys; sys.stdin.read(); print('no CUDA device', file=sys.stderr); sys.exit(3)",
    )
    broken = ModalDriver(_modal_settings(allowed_gpus, agent_command=failing))
    ws = new_id("ws")
    try:
        await broken.create(ws, WorkspaceSpec(resources={"gpu": "T4"}))
        async with asyncio.timeout(30):
            while (record := await broken.get(ws)).state == "running":
                await asyncio.sleep(0.2)
    finally:
        await broken.close()

    assert record.suspension is not None and record.suspension.reason == "failed_to_start"
    assert "code 3" in record.suspension.detail and "no CUDA device" in record.suspension.detail
    calls = modal_control_plane.calls()
    assert calls["SandboxGetTaskId"] and calls["AppFetchLogs"]  # the V1 way to its logs
    assert modal_control_plane.unimplemented == []
