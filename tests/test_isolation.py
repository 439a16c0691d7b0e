"""Workspace isolation with bubblewrap: what a command in a workspace can and cannot see.

The first tests run a plain command under the same `bwrap` argv the local driver gives the
agent; the last ones go through the driver and its agent. They skip, with bwrap's own reason,
where bwrap cannot create its namespaces.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from modal_workspace_core import policy
from modal_workspace_core.drivers.base import WorkspaceSpec
from modal_workspace_core.drivers.local import LocalDriver
from modal_workspace_core.drivers.sandbox import (
    SANDBOX_HOME,
    SANDBOX_PATH,
    WORKSPACE_ROOT,
    SandboxLayout,
    bwrap_argv,
    probe,
    python_environment,
)
from support.agent_exec import run

ISOLATION = probe()
needs_bwrap = pytest.mark.skipif(not ISOLATION.enabled, reason=ISOLATION.reason)


def make_layout(data_root: Path, *, block_network: bool = False) -> SandboxLayout:
    ws = data_root / f"ws-{secrets.token_hex(16)}"
    dirs = [ws / name for name in ("workspace", "home", "state", "run")]
    for d in dirs:
        d.mkdir(parents=True)
    return SandboxLayout(
        *dirs, block_network=block_network, hidden=(data_root, Path.home().resolve())
    )


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
    """A TCP server on the host's 127.0.0.1 that accepts and closes connections."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        server.close()


def test_the_argv_never_ties_the_daemon_to_its_parent(data_root: Path) -> None:
    layout = make_layout(data_root)
    argv = bwrap_argv("bwrap", layout, ["true"])
    assert "--die-with-parent" not in argv
    assert argv[argv.index("--") + 1 :] == ["true"]
    assert "--share-net" in argv
    blocked = bwrap_argv("bwrap", make_layout(data_root, block_network=True), ["true"])
    assert "--unshare-all" in blocked and "--share-net" not in blocked


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
def test_host_secrets_in_etc_are_masked(data_root: Path) -> None:
    shadow = Path("/etc/shadow")
    if not os.access(shadow, os.R_OK):
        pytest.skip("/etc/shadow is not readable on the host either")
    assert "root:" in shadow.read_text()
    done = run_in(make_layout(data_root), "cat /etc/shadow; cat /etc/passwd")
    assert "root:" in done.stdout  # passwd stays readable for tools that look users up
    assert shadow.read_text() not in done.stdout


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
def test_block_network_makes_a_host_loopback_server_unreachable(
    data_root: Path, loopback_server: int
) -> None:
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{loopback_server} && echo connected"
    shared = run_in(make_layout(data_root), f"bash -c '{connect}'")
    assert shared.stdout == "connected\n", shared.stderr
    blocked = run_in(make_layout(data_root, block_network=True), f"bash -c '{connect}'")
    assert blocked.returncode != 0
    assert "connected" not in blocked.stdout


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
        out, exit_event = await run(client, f"pwd; cat '{path}' || echo unreadable")
    finally:
        await client.close()
    assert out.splitlines()[0] == WORKSPACE_ROOT
    assert out.splitlines()[-1] == "unreadable"
    assert secret not in out
    assert exit_event["returncode"] == 0


async def test_block_network_cuts_a_workspace_off_the_host_loopback(
    isolated_driver: LocalDriver, loopback_server: int
) -> None:
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{loopback_server} && echo connected"
    results = {}
    for blocked in (False, True):
        wid = policy.new_id("ws")
        record = await isolated_driver.create(wid, WorkspaceSpec(block_network=blocked))
        assert record.block_network is blocked
        client = await isolated_driver.connect(wid)
        try:
            results[blocked] = await run(client, connect)
        finally:
            await client.close()
    assert results[False][0] == "connected\n"
    assert "connected" not in results[True][0]
    assert results[True][1]["returncode"] != 0
