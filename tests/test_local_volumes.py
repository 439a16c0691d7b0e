"""Volumes on the local driver, through the Python API over the real driver and agent: an
allowlisted name is a directory of the data root bound at the requested path, shared by the
workspaces that mount it, kept after they end, and nothing else of the data root in view."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import modal_workspace_core as mwc
import pytest
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.local.bubblewrap import probe
from modal_workspace_core.errors import WorkspaceError

ISOLATION = probe()
needs_bwrap = pytest.mark.skipif(not ISOLATION.enabled, reason=ISOLATION.reason)
ALLOWED = {"MODAL_WORKSPACE_ALLOWED_VOLUMES": "shared,other"}


async def _client(data: Path, extra: dict[str, str]) -> AsyncIterator[mwc.Workspaces]:
    settings = load_settings({**ALLOWED, **extra}, data_root=data)
    async with mwc.Workspaces(settings=settings) as client:
        try:
            yield client
        finally:
            for ws in await client.list():
                await ws.terminate()


@pytest.fixture
async def wss(tmp_path: Path) -> AsyncIterator[mwc.Workspaces]:
    async for client in _client(tmp_path / "data", {}):
        yield client


async def sh(ws: mwc.Workspace, command: str) -> str:
    done = await ws.exec(command)
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


@needs_bwrap
async def test_two_workspaces_share_a_volume_that_outlives_them(
    wss: mwc.Workspaces, tmp_path: Path
) -> None:
    one = await wss.create(volumes={"/data": "shared"}, block_network=True)
    two = await wss.create(volumes={"/workspace/cache": "shared"}, block_network=True)
    await sh(one, "echo from-one > /data/a && mkdir /data/dir && echo x > /data/dir/f")
    assert await sh(two, "cat /workspace/cache/a") == "from-one\n"
    # Either may change what the other made: with a uid per workspace, through the ACLs.
    await sh(two, "echo from-two >> /workspace/cache/a && echo y > /workspace/cache/dir/g")
    assert await sh(one, "cat /data/a /data/dir/g") == "from-one\nfrom-two\ny\n"
    await one.terminate()
    await two.terminate()
    host = tmp_path / "data" / "volumes" / "shared"
    assert (host / "a").read_text() == "from-one\nfrom-two\n"
    assert os.stat(host).st_mode & 0o777 in (0o700, 0o770)  # 0770 shows an ACL's mask
    three = await wss.create(volumes={"/data": "shared"}, block_network=True)
    assert await sh(three, "cat /data/a") == "from-one\nfrom-two\n"


@needs_bwrap
async def test_the_data_root_stays_out_of_reach_through_a_volume(
    wss: mwc.Workspaces, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    ws = await wss.create(volumes={"/data": "shared"}, block_network=True)
    (data / "volumes" / "secret-next-door").write_text("host only\n")
    listing = await sh(ws, "ls -a /data/.. ; ls -a /data/../..")
    assert "secret-next-door" not in listing and ws.id not in listing
    # A symlink a command leaves in the volume resolves in the sandbox's view only.
    await sh(ws, f"ln -s {data} /data/up && ln -s ../secret-next-door /data/side")
    seen = await ws.exec(f"ls /data/up/ {data}; cat /data/side")
    assert "channel.key" not in seen.stdout and ws.id not in seen.stdout
    assert "host only" not in seen.stdout
    # The gateway, too, never follows them: the host's file keeps its ACL-free mode.
    assert "host only" in (data / "volumes" / "secret-next-door").read_text()


@needs_bwrap
async def test_a_volume_deep_inside_the_workspace_gets_its_mount_point_made_there(
    wss: mwc.Workspaces,
) -> None:
    ws = await wss.create(volumes={"/workspace/v/cache": "shared"}, block_network=True)
    assert await sh(ws, "echo ok > /workspace/v/cache/f; cat /workspace/v/cache/f") == "ok\n"


@needs_bwrap
async def test_a_volume_off_the_allowlist_is_forbidden_and_one_on_it_mounted(
    wss: mwc.Workspaces,
) -> None:
    with pytest.raises(WorkspaceError) as err:
        await wss.create(volumes={"/data": "someone-elses"}, block_network=True)
    assert err.value.status == 403 and "volumes[" in str(err.value)
    assert await wss.list() == []
    ws = await wss.create(volumes={"/data": "other"}, block_network=True)
    assert await sh(ws, "touch /data/f && ls /data") == "f\n"


@pytest.mark.parametrize(
    "mount",
    [
        "data",
        "/data/../etc",
        "/",
        "/workspace",
        "/home",
        "/home/workspace",
        "/tmp",
        "/proc",
        "/dev/shm",
        "/etc",
        "/usr/local",
        "/run",
        "/run/agent/state",
        "/run/agent/sock",
    ],
)
async def test_a_bad_mount_path_is_refused_before_anything_is_made(
    wss: mwc.Workspaces, tmp_path: Path, mount: str
) -> None:
    with pytest.raises(WorkspaceError) as err:
        await wss.create(volumes={mount: "shared"}, block_network=True)
    assert err.value.status == 400 and "volumes[" in str(err.value), err.value
    assert await wss.list() == []
    assert not (tmp_path / "data" / "volumes").exists()


@needs_bwrap
async def test_a_volume_over_the_agents_python_or_in_another_volume_is_refused(
    wss: mwc.Workspaces,
) -> None:
    for volumes in (
        {os.path.dirname(sys.prefix): "shared"},
        {"/data": "shared", "/data/inner": "other"},
    ):
        with pytest.raises(WorkspaceError) as err:
            await wss.create(volumes=volumes, block_network=True)
        assert err.value.status == 400 and "volumes[" in str(err.value), err.value
    assert await wss.list() == []


async def test_unisolated_a_volume_is_refused_saying_why(tmp_path: Path) -> None:
    async for client in _client(tmp_path / "data", {"MODAL_WORKSPACE_ISOLATION": "none"}):
        with pytest.raises(WorkspaceError) as err:
            await client.create(volumes={"/data": "shared"})
        assert err.value.status == 400 and "bubblewrap" in str(err.value)
        assert await client.list() == []
        assert not (tmp_path / "data" / "volumes").exists()
