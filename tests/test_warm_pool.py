"""The Modal driver's warm pool (`MODAL_WORKSPACE_WARM_POOL`), through the real SDK against the
test control plane with the real agent: sandboxes of the default resources started ahead, each
claimed by one plain create (which then works as any workspace: found again by another lookup,
snapshotted, resumed), refilled in the background; creates that would start another kind of
sandbox never claim one; entries that ended while they waited are not handed out; old ones are
replaced; and the pools of gateways that stopped are ended by any gateway's sweep."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_control_plane.isolation import usable_bwrap
from modal_proto import api_pb2
from modal_workspace_core.config import ConfigError, load_settings
from modal_workspace_core.drivers.modal import warm_pool
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings
from modal_workspace_core.drivers.modal.warm_pool import POOL_OWNER_TAG, POOL_TAG, WAITING
from modal_workspace_core.drivers.modal.workspace_lookup import TAG_WORKSPACE_ID
from modal_workspace_core.surfaces.python_client import Workspaces
from test_modal_round_trips import spent

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

IMAGE = "warm-pool-image"
APP = "warm-pool"


def waiting(plane: ControlPlane) -> list[str]:
    """The running sandboxes still waiting in some pool."""
    return [
        s.sandbox_id for s in plane.sandboxes() if s.running and s.tags.get(POOL_TAG) == WAITING
    ]


async def until(check: object, what: str, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while not check():  # type: ignore[operator]
            await asyncio.sleep(0.05)


def gateway(tmp_path: Path, name: str, pool: int) -> tuple[ModalDriver, Workspaces]:
    settings = load_settings(
        {
            "MODAL_WORKSPACE_DRIVER": "modal",
            "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / name),
            "MODAL_WORKSPACE_JANITOR_SECONDS": "0",
        }
    )
    driver = ModalDriver(ModalSettings(app_name=APP, default_image_name=IMAGE, warm_pool=pool))
    return driver, Workspaces(driver, settings=settings)


@pytest.fixture
async def pooled(
    modal_control_plane: ControlPlane, tmp_path: Path
) -> AsyncIterator[tuple[ModalDriver, Workspaces]]:
    if not usable_bwrap():
        pytest.skip("bubblewrap does not work here (.ci/run installs it)")
    modal_control_plane.publish_image(IMAGE, "im-warmpoolimage000000")
    driver, wss = gateway(tmp_path, "data", pool=2)
    async with wss:
        await until(lambda: driver.pool is not None and driver.pool.waiting() == 2, "a full pool")
        yield driver, wss
    await driver.close()


async def test_a_plain_create_claims_a_waiting_sandbox_which_then_is_an_ordinary_workspace(
    pooled: tuple[ModalDriver, Workspaces], modal_control_plane: ControlPlane, tmp_path: Path
) -> None:
    driver, wss = pooled
    plane = modal_control_plane
    pool = driver.pool
    assert pool is not None
    before = set(waiting(plane))
    assert len(before) == 2

    ws = await wss.create()
    # One of the waiting sandboxes is the workspace's now: its tags, no pool tag; no new
    # sandbox was started for it (the one started after is the refill).
    (claimed,) = [s for s in plane.sandboxes() if s.tags.get(TAG_WORKSPACE_ID) == ws.id]
    assert claimed.sandbox_id in before and POOL_TAG not in claimed.tags
    assert (await ws.exec("id -u; pwd; echo hi")).stdout == "1000\n/workspace\nhi\n"
    await until(lambda: pool.waiting() == 2, "the refill")
    assert (pool.started, pool.claimed) == (3, 1)

    # Another gateway (no handle, no record of the create) finds it and reaches its agent.
    other_driver, other = gateway(tmp_path, "other", pool=0)
    async with other:
        again = await other.get(ws.id)
        assert again.info.state == "running"
        assert (await again.exec("cat /proc/1/cmdline | tr '\\0' ' '")).returncode == 0
        assert ws.id in [w.id for w in await other.list()]
    await other_driver.close()

    # Its lifecycle is any workspace's: a snapshot, a terminate that keeps it, a resume.
    await ws.file_write("kept.txt", "from a pooled sandbox\n")
    snap = await ws.snapshot(label="pooled")
    assert (await ws.terminate()).terminated
    await ws.resume(snapshot_id=snap.snapshot_id)
    assert (await ws.exec("cat kept.txt")).stdout == "from a pooled sandbox\n"
    assert pool.claimed == 1, "a resume starts the workspace's own sandbox"


async def test_a_create_that_would_start_another_sandbox_never_claims_one(
    pooled: tuple[ModalDriver, Workspaces], modal_control_plane: ControlPlane
) -> None:
    driver, wss = pooled
    pool = driver.pool
    assert pool is not None
    others = [
        await wss.create(env={"MODE": "mine"}),
        await wss.create(resources={"cpu": 3}),
        await wss.create(resources={"timeout_seconds": 600}),
        await wss.create(resources={"idle_timeout_seconds": 60}),
        await wss.create(block_network=True),
    ]
    assert pool.claimed == 0
    assert len(waiting(modal_control_plane)) == 2
    # And none of them sees another's or the pool's environment.
    assert (await others[0].exec("echo $MODE")).stdout == "mine\n"
    assert (await others[1].exec("echo ${MODE:-none}")).stdout == "none\n"


async def test_a_sandbox_that_ended_while_it_waited_is_not_handed_out(
    pooled: tuple[ModalDriver, Workspaces], modal_control_plane: ControlPlane
) -> None:
    driver, wss = pooled
    plane = modal_control_plane
    for sandbox_id in waiting(plane):
        plane.end_sandbox(sandbox_id, api_pb2.GenericResult.GENERIC_STATUS_TERMINATED)
    ws = await wss.create()
    assert (await ws.exec("echo started")).stdout == "started\n"
    # The ended one it tried first does not read as the workspace's.
    (mine,) = [s for s in plane.sandboxes() if s.tags.get(TAG_WORKSPACE_ID) == ws.id]
    assert mine.name == ws.id, "a sandbox of its own, started for it"
    assert driver.pool is not None and driver.pool.claimed == 1, "it tried the pool first"
    assert ws.info.lifecycle == [] and (await ws.refresh()).lifecycle == [], "no resume"


async def test_old_entries_are_replaced_and_close_ends_the_waiting_ones(
    pooled: tuple[ModalDriver, Workspaces],
    modal_control_plane: ControlPlane,
) -> None:
    driver, _ = pooled
    pool = driver.pool
    assert pool is not None
    first = set(waiting(modal_control_plane))
    pool.max_age = 0.5
    pool.wake()
    await until(
        lambda: pool.ended >= 2 and not first & set(waiting(modal_control_plane)),
        "the first entries ended",
    )
    pool.max_age = 600.0
    pool.wake()
    await until(lambda: pool.waiting() == 2, "a full pool again")
    await pool.close()
    assert waiting(modal_control_plane) == []


async def test_the_sweep_ends_the_pools_of_gateways_that_stopped_and_keeps_its_own(
    pooled: tuple[ModalDriver, Workspaces],
    modal_control_plane: ControlPlane,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    driver, _ = pooled
    plane = modal_control_plane
    pool = driver.pool
    assert pool is not None
    # A gateway that stopped without closing its pool (a crash, a scale-down).
    gone_driver, gone = gateway(tmp_path, "gone", pool=1)
    async with gone:
        await until(lambda: gone_driver.pool and gone_driver.pool.waiting() == 1, "its pool")
        assert gone_driver.pool is not None
        gone_id = gone_driver.pool.pool_id
        gone_driver.pool = None  # its close no longer ends them: as if it crashed
    owners = {
        s.tags.get(POOL_OWNER_TAG) for s in plane.sandboxes() if s.sandbox_id in waiting(plane)
    }
    assert owners == {pool.pool_id, gone_id}

    await driver.end_strays()
    assert len(waiting(plane)) == 3, "none old enough yet"
    monkeypatch.setattr(warm_pool, "STRAY_AGE_SECONDS", 0.0)
    await driver.end_strays()
    owners = {
        s.tags.get(POOL_OWNER_TAG) for s in plane.sandboxes() if s.sandbox_id in waiting(plane)
    }
    assert owners == {pool.pool_id}


def test_the_pool_size_is_a_setting_off_by_default_and_bounded() -> None:
    def read(value: str) -> int:
        env = {"MODAL_WORKSPACE_DRIVER": "modal", "MODAL_WORKSPACE_WARM_POOL": value}
        modal = load_settings(env).modal
        assert modal is not None
        return modal.warm_pool

    assert (read(""), read("0"), read("3")) == (0, 0, 3)
    for bad in ("-1", "21", "two"):
        with pytest.raises(ConfigError, match="MODAL_WORKSPACE_WARM_POOL"):
            read(bad)


async def test_the_calls_from_a_create_to_its_first_output_with_the_pool(
    pooled: tuple[ModalDriver, Workspaces], modal_control_plane: ControlPlane
) -> None:
    """docs/modal.md's table: a claim is the workspace's tags, its daemon's configuration and
    whether it still runs, at once (beside them its records' Volume calls, as on any create),
    then the exec and its output on the pooled sandbox's handle: 3 calls one after another
    where a create without the pool makes 4, and no container to wait for (the refill, which
    starts the next entry in the background, is held off here)."""
    driver, wss = pooled
    plane = modal_control_plane
    pool = driver.pool
    assert pool is not None
    await (await wss.create()).exec("true")  # the process's app, image and Volume
    await until(lambda: pool.waiting() == 2, "the refill")

    pool.size = 1  # no refill while the journey is counted
    before = plane.calls()
    ws = await wss.create()
    assert (await ws.exec("echo hi")).stdout == "hi\n"
    assert spent(plane, before) == {
        "SandboxTagsSetV2": 1,
        "SandboxStdinWriteV2": 1,
        "SandboxWaitV2": 1,
        "VolumePutFiles2": 3,
        "BlockPut": 1,
        "TaskExecStart": 1,
        "TaskExecStdioRead": 1,
    }
