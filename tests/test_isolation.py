"""Workspace isolation with bubblewrap: what a command in a workspace can and cannot see.

The first tests run a plain command under the same `bwrap` argv the local driver gives the
agent; the last ones go through the driver and its agent. They skip, with bwrap's own reason,
where bwrap cannot create its namespaces.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from modal_workspace_core import policy
from modal_workspace_core.drivers.base import WorkspaceSpec
from modal_workspace_core.drivers.local.bubblewrap import (
    SANDBOX_HOME,
    SANDBOX_PATH,
    WORKSPACE_ROOT,
    SandboxLayout,
    bwrap_argv,
    probe,
    python_environment,
)
from modal_workspace_core.drivers.local.bubblewrap_etc import write_generated
from modal_workspace_core.drivers.local.driver import LocalDriver
from support.agent_exec import run
from support.loopback import loopback_listener

ISOLATION = probe()
needs_bwrap = pytest.mark.skipif(not ISOLATION.enabled, reason=ISOLATION.reason)


def make_layout(data_root: Path, *, block_network: bool = False) -> SandboxLayout:
    ws = data_root / f"ws-{secrets.token_hex(16)}"
    ws.mkdir()
    etc = tuple(write_generated(ws / "etc", os.getuid(), os.getgid(), SANDBOX_HOME))
    layout = SandboxLayout(
        workspace=ws / "workspace",
        home=ws / "home",
        state=ws / "state",
        socket_dir=ws / "run",
        etc_files=etc,
        block_network=block_network,
        hidden=(data_root, Path.home().resolve()),
    )
    for d in (layout.workspace, layout.home, layout.state, layout.socket_dir):
        d.mkdir(parents=True)
    return layout


def run_in(
    layout: SandboxLayout, script: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    assert ISOLATION.bwrap is not None
    argv = bwrap_argv(ISOLATION.bwrap, layout, ["/bin/sh", "-c", script])
    base = {"PATH": SANDBOX_PATH, "HOME": SANDBOX_HOME}
    return subprocess.run(
        argv, env={**base, **(env or {})}, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    return root


@pytest.fixture
def planted_in_home() -> Iterator[tuple[Path, str]]:
    """A uniquely named file with unique content in the host user's real home directory."""
    secret = f"planted-{secrets.token_hex(16)}"
    path = Path.home() / f".mwc-isolation-{secrets.token_hex(8)}"
    path.write_text(secret)
    try:
        yield path, secret
    finally:
        path.unlink()


@pytest.fixture
def loopback_server() -> Iterator[int]:
    with loopback_listener() as port:
        yield port


def test_the_argv_never_ties_the_daemon_to_its_parent(data_root: Path) -> None:
    layout = make_layout(data_root)
    argv = bwrap_argv("bwrap", layout, ["true"])
    assert "--die-with-parent" not in argv
    assert argv[argv.index("--") + 1 :] == ["true"]
    # The network is always a namespace of the sandbox's own: pasta attaches to it, or nothing.
    assert "--unshare-net" in argv and "--share-net" not in argv


@needs_bwrap
def test_a_command_runs_in_the_workspace_as_its_root_and_cwd(data_root: Path) -> None:
    layout = make_layout(data_root)
    (layout.workspace / "from-host.txt").write_text("hello from the host\n")
    done = run_in(layout, "pwd; cat /workspace/from-host.txt; echo made > inside.txt; echo ~")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [WORKSPACE_ROOT, "hello from the host", SANDBOX_HOME]
    assert (layout.workspace / "inside.txt").read_text() == "made\n"


@needs_bwrap
def test_a_file_planted_in_the_host_home_is_not_readable(
    data_root: Path, planted_in_home: tuple[Path, str]
) -> None:
    path, secret = planted_in_home
    layout = make_layout(data_root)
    done = run_in(layout, f"cat '{path}'")
    assert done.returncode != 0
    assert secret not in done.stdout
    # Nowhere else either: not under any home, /tmp, the workspace or the agent's directories.
    search = run_in(layout, f"grep -rs '{secret}' /home /root /tmp /workspace /run; echo end")
    assert search.stdout == "end\n"


@needs_bwrap
def test_the_data_root_and_other_workspaces_are_not_visible(data_root: Path) -> None:
    other = make_layout(data_root)
    (other.workspace / "theirs.txt").write_text("another workspace's file")
    layout = make_layout(data_root)
    done = run_in(layout, f"ls '{data_root}' || echo missing; cat '{other.workspace}/theirs.txt'")
    assert "missing" in done.stdout
    assert "another workspace" not in done.stdout


@needs_bwrap
def test_etc_is_constructed_not_the_hosts(data_root: Path) -> None:
    done = run_in(make_layout(data_root), "ls /etc; cat /etc/passwd; cat /etc/shadow")
    names = set(done.stdout.split())
    # Users for tools that look them up, the loader's cache, certificates: what programs need.
    assert {"passwd", "group", "hosts", "ld.so.cache", "ssl"} <= names
    assert f":{os.getuid()}:{os.getgid()}:workspace:{SANDBOX_HOME}:" in done.stdout
    # Nothing else of the host's: no password hashes, no service or sudo configuration.
    assert not names & {"shadow", "gshadow", "sudoers", "ssh", "apt", "pam.d", "cron.d"}
    assert "No such file" in done.stderr


@needs_bwrap
def test_host_processes_are_not_visible(data_root: Path) -> None:
    script = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"
    done = run_in(make_layout(data_root), script)
    assert done.returncode == 0, done.stderr
    seen = [line for line in done.stdout.splitlines() if line.strip()]
    # bwrap's init, the shell and `tr`: not this test runner, nor anything else of the host.
    assert len(seen) < 10, seen
    runner = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert runner.strip() not in [line.strip() for line in seen]


@needs_bwrap
def test_secrets_travel_in_the_environment_not_the_argv(data_root: Path) -> None:
    token = f"tok-{secrets.token_hex(8)}"
    layout = make_layout(data_root)
    argv = bwrap_argv("bwrap", layout, ["printenv", "TOKEN"])
    assert all(token not in arg for arg in argv)
    assert run_in(layout, "printenv TOKEN", env={"TOKEN": token}).stdout == f"{token}\n"


@needs_bwrap
def test_the_sandbox_has_a_loopback_of_its_own(data_root: Path, loopback_server: int) -> None:
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{loopback_server} && echo connected"
    for block_network in (False, True):
        done = run_in(make_layout(data_root, block_network=block_network), f"bash -c '{connect}'")
        assert done.returncode != 0
        assert "connected" not in done.stdout


@needs_bwrap
def test_the_agent_python_environment_is_usable_read_only(data_root: Path) -> None:
    assert ISOLATION.bwrap is not None
    layout = make_layout(data_root)
    code = (
        "import modal_workspace_core as m, sys; print(m.__version__); open(sys.prefix + '/x', 'w')"
    )
    argv = bwrap_argv(
        ISOLATION.bwrap, layout, [sys.executable, "-I", "-c", code], readonly=python_environment()
    )
    done = subprocess.run(
        argv, env={"PATH": SANDBOX_PATH}, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.stdout == "0.1.0\n", done.stderr
    assert "Read-only file system" in done.stderr


# --- the same, through the local driver and its agent --------------------------------------


@pytest.fixture
async def isolated_driver(tmp_path: Path) -> AsyncIterator[LocalDriver]:
    if not ISOLATION.enabled:
        pytest.skip(ISOLATION.reason)
    driver = LocalDriver(tmp_path / "data", isolation="bwrap")
    try:
        yield driver
    finally:
        for record in await driver.list():
            await driver.destroy(record.workspace_id)
        await driver.close()


async def test_a_workspace_command_cannot_read_the_host_home(
    isolated_driver: LocalDriver, planted_in_home: tuple[Path, str]
) -> None:
    path, secret = planted_in_home
    wid = policy.new_id("ws")
    record = await isolated_driver.create(wid, WorkspaceSpec())
    assert record.root == WORKSPACE_ROOT
    client = await isolated_driver.connect(wid)
    try:
        done = await run(client, f"pwd; cat '{path}' || echo unreadable")
    finally:
        await client.close()
    assert done.stdout.splitlines() == [WORKSPACE_ROOT, "unreadable"]
    assert secret not in done.stdout + done.stderr
    assert done.exit["returncode"] == 0


async def test_only_allowlisted_host_ports_are_reachable_and_block_network_cuts_them_too(
    tmp_path: Path, loopback_server: int
) -> None:
    if not ISOLATION.enabled or ISOLATION.pasta is None:
        pytest.skip("needs bubblewrap and pasta")
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{loopback_server} && echo connected"
    results = {}
    for ports, blocked in (((), False), ((loopback_server,), False), ((loopback_server,), True)):
        driver = LocalDriver(tmp_path / f"data-{len(results)}", isolation="bwrap", host_ports=ports)
        wid = policy.new_id("ws")
        try:
            record = await driver.create(wid, WorkspaceSpec(block_network=blocked))
            assert record.block_network is blocked
            client = await driver.connect(wid)
            try:
                results[(ports, blocked)] = await run(client, connect)
            finally:
                await client.close()
        finally:
            await driver.destroy(wid)
            await driver.close()
    assert results[((), False)].stdout == ""
    assert results[((loopback_server,), False)].stdout == "connected\n"
    assert results[((loopback_server,), True)].stdout == ""


def test_a_python_environment_under_tmp_is_mounted_over_the_sandboxes_tmp(
    data_root: Path, tmp_path: Path
) -> None:
    # A checkout under /tmp (as CI's is) must stay visible: /tmp comes first, then the mounts
    # of the environment on top of it, whether /tmp is a tmpfs or the workspace's disk.
    venv = Path("/tmp") / "some-checkout" / ".venv"
    for tmp in (None, tmp_path / "disk-tmp"):
        layout = dataclasses.replace(make_layout(data_root), tmp=tmp)
        argv = bwrap_argv("bwrap", layout, ["true"], readonly=[venv])
        tmp_at = max(i for i, a in enumerate(argv) if a == "/tmp" and argv[i - 1] != "--dir")
        assert tmp_at < argv.index(str(venv))
