"""Every host-side operation on workspace data runs under the hostile tenant
(`hostile_tenant.py`): a command that keeps swapping its directories for symlinks to a host
directory (on inotify events and on a timer), FIFOs, a socket, hard links, a growing file, and
forged lines in every output it reaches. Asserted each time:
the host's canary is nowhere under the data root (so in no snapshot, fork or workspace), the
canary directory is unchanged, the operation ends within its bound, and its answer is true.

Local driver, isolated (bubblewrap), as the gateway's own user (root in CI, so workspaces have
a uid and a disk of their own; the same cases run as a user elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import modal_workspace_core as mwc
import pytest
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.local.bubblewrap import probe

from .hostile_tenant import Canary, assert_no_leak, files_holding, start_tenant

ISOLATION = probe()
pytestmark = pytest.mark.skipif(not ISOLATION.enabled, reason=f"needs bubblewrap: {ISOLATION}")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a disk per workspace needs root")
# No host-side operation on a workspace of this size may take longer.
BOUND = 120.0
STABLE = "stable/keep.txt"


async def bounded(what: str, awaitable: object) -> object:
    try:
        return await asyncio.wait_for(awaitable, BOUND)  # type: ignore[arg-type]
    except TimeoutError:
        pytest.fail(f"{what} did not end within {BOUND} s under the tenant")


@pytest.fixture
async def wss(tmp_path: Path) -> AsyncIterator[tuple[mwc.Workspaces, Path]]:
    data_root = tmp_path / "data"
    env = {"MODAL_WORKSPACE_ISOLATION": "bwrap", "MODAL_WORKSPACE_DISK_MB": "1024"}
    settings = load_settings(env, data_root=data_root)
    async with mwc.Workspaces(settings=settings) as workspaces:
        try:
            yield workspaces, data_root
        finally:
            # Forks are not the client object's own: end them too, and their disks.
            for info in await workspaces.list():
                with contextlib.suppress(mwc.WorkspaceError):
                    await info.terminate()


async def test_snapshots_forks_resume_and_removal_under_the_tenant_never_reach_the_host(
    wss: tuple[mwc.Workspaces, Path], tmp_path: Path
) -> None:
    workspaces, data_root = wss
    canary = Canary.make(tmp_path)
    ws = await workspaces.create()
    await ws.file_write(STABLE, "kept across every copy\n")
    await start_tenant(ws, canary)

    snapshot_ids = []
    for round_ in range(4):
        snap = await bounded("workspace_snapshot", ws.snapshot(label=f"round {round_}"))
        snapshot_ids.append(snap.snapshot_id)
        assert_no_leak(data_root, canary)
    listed = await ws.snapshot_list()
    assert [s.snapshot_id for s in listed.snapshots] == snapshot_ids

    fork = await bounded("workspace_fork", ws.fork(snapshot_id=snapshot_ids[-1]))
    taken = await bounded("workspace_fork without a snapshot", ws.fork())
    assert_no_leak(data_root, canary)
    for child_id in (fork.workspace_id, taken.workspace_id):
        child = await workspaces.get(child_id)
        read = await child.exec(
            f"cat {STABLE}; grep -rls HOST-CANARY /workspace ~ /tmp 2>/dev/null | head"
        )
        assert read.stdout == "kept across every copy\n", read.stdout
        assert child.info.lineage is not None
        assert child.info.lineage.parent_workspace_id == ws.id

    # A resume restores into the workspace's own directories, which the tenant shaped.
    await bounded("workspace_resume", ws.resume(snapshot_id=snapshot_ids[0]))
    assert (await ws.exec(f"cat {STABLE}")).stdout == "kept across every copy\n"
    await start_tenant(ws, canary)
    assert_no_leak(data_root, canary)

    deleted = await bounded("workspace_snapshot_delete", ws.snapshot_delete(snapshot_ids[1]))
    assert deleted is not None
    ended = await bounded("workspace_terminate", ws.terminate())
    assert ended.terminated
    for child_id in (fork.workspace_id, taken.workspace_id):
        await bounded("workspace_terminate", (await workspaces.get(child_id)).terminate())
    assert_no_leak(data_root, canary)
    assert canary.directory.is_dir()


async def test_file_and_artifact_operations_under_the_tenant_stay_in_the_workspace(
    wss: tuple[mwc.Workspaces, Path], tmp_path: Path
) -> None:
    workspaces, data_root = wss
    canary = Canary.make(tmp_path)
    ws = await workspaces.create()
    await start_tenant(ws, canary)
    for _ in range(5):
        for d in range(6):
            for name in ("secret", "channel.key"):
                try:
                    got = await bounded("file_read", ws.file_read(f"t/d{d}/{name}"))
                except mwc.WorkspaceError:
                    continue  # met as the link: refused, as a link out of the root is
                assert "HOST-CANARY" not in str(got)
        listing = await bounded("file_list", ws.file_list("t", depth=3))
        assert "HOST-CANARY" not in str(listing)
        # A patch that updates, adds and deletes in each directory as it is swapped: it applies
        # inside the workspace or is refused, and never reaches the canary.
        for d in range(6):
            patch = (
                f"*** Begin Patch\n*** Update File: t/d{d}/secret\n@@\n-workspace data\n"
                f"+patched\n*** Add File: t/d{d}/added.txt\n+added\n"
                f"*** Delete File: t/d{d}/channel.key\n*** End Patch\n"
            )
            try:
                patched = await bounded("file_patch", ws.file_patch(patch))
            except mwc.WorkspaceError as err:
                assert "HOST-CANARY" not in err.message
                continue
            assert "HOST-CANARY" not in str(patched)
    target = tmp_path / "download"
    got = await bounded("artifact_download", ws.download_artifact("t", target))
    assert got is not None
    assert not files_holding(tmp_path / "download", b"HOST-CANARY")
    assert_no_leak(data_root, canary)
    await ws.terminate()


@needs_root
async def test_snapshots_are_refused_past_the_workspaces_budget_before_any_copy(
    tmp_path: Path,
) -> None:
    data_root = tmp_path / "data"
    env = {"MODAL_WORKSPACE_ISOLATION": "bwrap", "MODAL_WORKSPACE_DISK_MB": "128"}
    settings = load_settings(env, data_root=data_root)
    async with mwc.Workspaces(settings=settings) as workspaces:
        ws = await workspaces.create()
        done = await ws.exec("head -c 100000000 /dev/urandom > fill && echo filled")
        assert done.stdout == "filled\n", done.stderr
        taken, refusal = 0, None
        for _ in range(17):
            try:
                await bounded("workspace_snapshot", ws.snapshot())
                taken += 1
            except mwc.WorkspaceError as err:
                refusal = err
                break
        # Twice its 128 MiB disk: two copies of ~96 MiB fit, a third does not.
        assert taken == 2, taken
        assert refusal is not None and refusal.code == "limit"
        assert "snapshot budget of 256 MiB" in refusal.message, refusal.message
        assert str(data_root) not in refusal.message
        held = sum(p.stat().st_size for p in (data_root / "snapshots").rglob("*") if p.is_file())
        assert held < 256 << 20
        assert not list((data_root / "snapshots" / ws.id).glob(".building-*"))
        await ws.terminate()


@needs_root
async def test_a_snapshot_that_fails_names_no_host_path(tmp_path: Path) -> None:
    data_root = tmp_path / "data"
    (data_root / "snapshots").mkdir(parents=True)
    # Snapshots on a file system of 16 MiB: a 40 MB workspace cannot be copied there.
    mounted = os.system(f"mount -t tmpfs -o size=16m tmpfs {data_root / 'snapshots'}") == 0
    if not mounted:
        pytest.skip("cannot mount a tmpfs here")
    try:
        env = {
            "MODAL_WORKSPACE_ISOLATION": "bwrap",
            "MODAL_WORKSPACE_DISK_MB": "128",
            "MODAL_WORKSPACE_SNAPSHOT_FREE_FLOOR_MB": "0",
        }
        settings = load_settings(env, data_root=data_root)
        async with mwc.Workspaces(settings=settings) as workspaces:
            ws = await workspaces.create()
            await ws.exec("head -c 40000000 /dev/urandom > big")
            with pytest.raises(mwc.WorkspaceError) as failed:
                await bounded("workspace_snapshot", ws.snapshot())
            message = failed.value.message
            assert failed.value.code == "limit", message
            for host in (str(data_root), str(tmp_path), "/tmp/", "disk/workspace"):
                assert host not in message, message
            assert not list((data_root / "snapshots" / ws.id).glob("*")), "nothing half-built"
            await ws.terminate()
    finally:
        os.system(f"umount -l {data_root / 'snapshots'}")
