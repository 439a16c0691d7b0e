"""A workspace's snapshots stay bounded and a snapshot never carries the host into a fork: the
Python API in-process over the real local driver and agent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import modal_workspace_core as mwc
import pytest
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.base import LIFECYCLE_SNAPSHOTS_KEPT, MAX_SNAPSHOTS
from modal_workspace_core.operations.lifecycle import take_snapshot

pytest.importorskip("modal_workspace_core.drivers.local.driver")


@pytest.fixture
async def wss(tmp_path: Path) -> AsyncIterator[mwc.Workspaces]:
    # No lifecycle sweep: the test takes the lifecycle's snapshots itself.
    env = {"MODAL_WORKSPACE_JANITOR_SECONDS": "0"}
    async with mwc.Workspaces(settings=load_settings(env, data_root=tmp_path / "data")) as c:
        yield c


async def snapshot_kinds(wss: mwc.Workspaces, ws: str) -> list[str]:
    listed = await wss.call("workspace_snapshot_list", workspace_id=ws)
    return [s.kind for s in listed.snapshots]  # type: ignore[attr-defined]


async def test_snapshots_asked_for_are_bounded_and_the_lifecycle_keeps_only_its_newest(
    wss: mwc.Workspaces,
) -> None:
    ws = await wss.create()
    for _ in range(MAX_SNAPSHOTS):
        await wss.call("workspace_snapshot", workspace_id=ws.id)
    with pytest.raises(mwc.LimitError) as refused:
        await wss.call("workspace_snapshot", workspace_id=ws.id)
    assert refused.value.status == 429 and "delete one" in refused.value.message
    # An idle workspace is suspended again and again: its own snapshots do not pile up, and
    # none of the ones asked for is touched.
    taken = [(await take_snapshot(wss.service, ws.id, "idle")).snapshot_id for _ in range(6)]
    kinds = await snapshot_kinds(wss, ws.id)
    assert kinds.count("manual") == MAX_SNAPSHOTS
    assert kinds.count("idle") == LIFECYCLE_SNAPSHOTS_KEPT
    listed = await wss.call("workspace_snapshot_list", workspace_id=ws.id)
    kept = [s.snapshot_id for s in listed.snapshots if s.kind == "idle"]  # type: ignore[attr-defined]
    assert kept == taken[-LIFECYCLE_SNAPSHOTS_KEPT:]


async def test_a_symlink_in_a_snapshot_stays_a_link_and_shows_a_fork_nothing_of_the_host(
    wss: mwc.Workspaces, tmp_path: Path
) -> None:
    # A file of another workspace, and one of the host, by their host paths.
    other = await wss.create()
    await other.file_write("secret.txt", "other's\n")
    driver = wss.service.driver
    other_file = Path(driver.data_root) / other.id / "workspace" / "secret.txt"  # type: ignore[attr-defined]
    host_file = tmp_path / "host-secret.txt"
    host_file.write_text("host's\n")
    ws = await wss.create()
    await ws.exec(f"ln -s {other_file} to-other && ln -s {host_file} to-host")
    snapshot = await wss.call("workspace_snapshot", workspace_id=ws.id)
    kept = Path(driver.data_root) / "snapshots" / ws.id / snapshot.snapshot_id / "workspace"  # type: ignore[attr-defined]
    # The host-side copy kept the links as links: it followed neither.
    assert (kept / "to-other").is_symlink() and (kept / "to-host").is_symlink()
    fork = await wss.call("workspace_fork", workspace_id=ws.id, snapshot_id=snapshot.snapshot_id)
    forked = await wss.get(fork.workspace_id)  # type: ignore[attr-defined]
    shown = await forked.exec("cat to-other to-host 2>&1; true")
    if forked.info.root == "/workspace":  # isolated: the host's paths are not there
        assert "other's" not in shown.stdout and "host's" not in shown.stdout, shown.stdout
    await forked.terminate()
