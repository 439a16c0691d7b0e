"""Attacks on the local sandbox's boundary, through the public Python API (the same operations
REST and MCP serve), as a client with the token and as a command inside a workspace.

Each test names the property it attacks (docs/security.md). They need bubblewrap and pasta and,
for the uid and limit properties, a gateway running as root (as CI does); they skip and say why
elsewhere.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import modal_workspace_core as mwc
import pytest
from modal_workspace_core.channel.client import AgentClient, AgentError
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.local import daemon as local_daemon
from modal_workspace_core.drivers.local.bubblewrap import probe
from modal_workspace_core.drivers.local.driver import LocalDriver
from support.loopback import loopback_listener

ISOLATION = probe()
pytestmark = pytest.mark.skipif(
    not (ISOLATION.enabled and ISOLATION.pasta), reason=f"needs bubblewrap and pasta: {ISOLATION}"
)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="a uid per workspace needs root")


@pytest.fixture
async def wss(tmp_path: Path) -> AsyncIterator[mwc.Workspaces]:
    driver = LocalDriver(tmp_path / "data", isolation="bwrap")
    async with mwc.Workspaces(driver=driver) as workspaces:
        try:
            yield workspaces
        finally:
            for record in await driver.list():
                await driver.destroy(record.workspace_id)


@pytest.fixture
def loopback_port() -> Iterator[int]:
    with loopback_listener() as port:
        yield port


def _daemon_pid(driver: LocalDriver, workspace_id: str) -> int:
    import json

    pid_file = driver.data_root / workspace_id / "agent.pid"
    return int(json.loads(pid_file.read_text())["pid"])


# --- 1. nothing a client or a workspace controls reaches the host side -----------------------


def _build_preload(tmp_path: Path, marker: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the preloaded library")
    source = tmp_path / "evil.c"
    source.write_text(
        "#include <stdio.h>\n"
        "__attribute__((constructor)) static void pwn(void) {\n"
        f'  FILE *f = fopen("{marker}", "a"); if (f) {{ fputs("loaded\\n", f); fclose(f); }}\n'
        "}\n"
    )
    library = tmp_path / "evil.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", library, source], check=True)
    return library


async def test_a_workspace_ld_preload_never_runs_on_the_host_when_the_agent_restarts(
    wss: mwc.Workspaces, tmp_path: Path
) -> None:
    # The library writes a marker at a host path: /tmp of the host is not the sandbox's /tmp,
    # so the marker appears on the host only if a host process loaded it.
    marker = Path(f"/tmp/mwc-preloaded-{secrets.token_hex(8)}")
    library = _build_preload(tmp_path, marker)
    ws = await wss.create(env={"LD_PRELOAD": "/workspace/evil.so"})
    await ws.file_write(
        "evil.so", base64.b64encode(library.read_bytes()).decode(), encoding="base64"
    )
    driver = wss.service.driver
    assert isinstance(driver, LocalDriver)
    # The agent dies (a crash, an OOM kill); the next request starts it again.
    os.killpg(_daemon_pid(driver, ws.id), signal.SIGKILL)
    await asyncio.sleep(0.2)
    try:
        done = await ws.exec("echo $LD_PRELOAD")
        assert done.stdout == "/workspace/evil.so\n"  # the workspace's env still applies inside
        assert not marker.exists(), "the workspace's LD_PRELOAD ran in a host process"
    finally:
        marker.unlink(missing_ok=True)


async def test_the_hosts_processes_get_a_fixed_environment(wss: mwc.Workspaces) -> None:
    ws = await wss.create(env={"LD_PRELOAD": "/nonexistent.so", "PATH": "/workspace/bin"})
    driver = wss.service.driver
    assert isinstance(driver, LocalDriver)
    environ = Path(f"/proc/{_daemon_pid(driver, ws.id)}/environ").read_bytes()
    names = {item.split(b"=", 1)[0] for item in environ.split(b"\0") if item}
    assert names == {b"PATH", b"LANG", b"MODAL_WORKSPACE_ID"}
    assert b"/workspace/bin" not in environ


# --- 2. a minimal filesystem view ----------------------------------------------------------


async def test_files_the_operator_keeps_in_etc_are_not_visible(wss: mwc.Workspaces) -> None:
    if not os.access("/etc", os.W_OK):
        pytest.skip("needs to write a file under the host's /etc")
    secret = f"operator-token-{secrets.token_hex(16)}"
    planted = Path(f"/etc/mwc-gateway-token-{secrets.token_hex(4)}")
    planted.write_text(secret)
    try:
        ws = await wss.create()
        done = await ws.exec(f"cat {planted}; grep -rs {secret} /etc /usr/local /run; echo end")
    finally:
        planted.unlink()
    assert done.stdout == "end\n"
    assert secret not in done.stderr


def test_the_gateway_refuses_a_secrets_file_under_a_tree_workspaces_see(tmp_path: Path) -> None:
    # The Python environment is mounted read-only into every sandbox.
    inside = Path(sys.prefix) / f"mwc-secrets-{secrets.token_hex(4)}.json"
    inside.write_text('{"github": {"GH_TOKEN": "x"}}')
    try:
        env = {
            **os.environ,
            "MODAL_WORKSPACE_LOCAL_SECRETS_FILE": str(inside),
            "MODAL_WORKSPACE_ALLOWED_SECRETS": "github",
            "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "data"),
            "MODAL_WORKSPACE_ISOLATION": "bwrap",
        }
        done = subprocess.run(
            [sys.executable, "-m", "modal_workspace_core.surfaces.cli", "serve", "--port", "0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        inside.unlink()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "every workspace sees" in done.stderr


# --- 3. network without the host's loopback ------------------------------------------------


async def test_a_command_cannot_reach_a_service_on_the_host_loopback(
    wss: mwc.Workspaces, loopback_port: int
) -> None:
    ws = await wss.create()
    script = f"exec 3<>/dev/tcp/127.0.0.1/{loopback_port} && echo connected"
    done = await ws.exec(f"bash -c '{script}'; bash -c '{script.replace('127.0.0.1', '[::1]')}'")
    assert "connected" not in done.stdout


# --- 4. its own user and its limits --------------------------------------------------------


@needs_root
async def test_each_workspace_runs_as_an_unprivileged_uid_of_its_own(wss: mwc.Workspaces) -> None:
    uids = []
    for _ in range(2):
        ws = await wss.create()
        started = await ws.realtime_exec_start("sleep 30")
        await asyncio.sleep(0.3)
        pid = (await ws.realtime_exec_status(started.exec_id)).pid
        assert pid is not None
        done = await ws.exec("id -u; grep CapEff /proc/self/status")
        assert done.stdout.split()[0] != "0"
        assert done.stdout.split()[-1] == "0000000000000000"  # no capabilities at all
        uids.append(_host_uid_of_command(ws.id, "sleep 30"))
    assert all(uid >= 1000 for uid in uids)
    assert uids[0] != uids[1]


def _host_uid_of_command(workspace_id: str, cmdline: str) -> int:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.joinpath("cmdline").read_bytes().replace(b"\0", b" ").strip() != (
                cmdline.encode()
            ):
                continue
            environ = entry.joinpath("environ").read_bytes()
        except OSError:
            continue
        if f"MODAL_WORKSPACE_ID={workspace_id}".encode() in environ:
            status = entry.joinpath("status").read_text()
            return int(
                next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1]
            )
    raise AssertionError(f"no process {cmdline!r} of {workspace_id}")


async def test_a_command_cannot_read_the_agents_environment_memory_or_state(
    wss: mwc.Workspaces,
) -> None:
    ws = await wss.create()
    # Inside, the agent is pid 2 (bwrap's init is 1); its state and socket are under /run/agent.
    done = await ws.exec(
        "cat /proc/2/cmdline >/dev/null && echo sees-the-agent; "
        "cat /proc/2/environ; head -c 1 /proc/2/mem; ls /proc/2/fd; ls /run/agent/state; "
        "echo end"
    )
    assert "sees-the-agent" in done.stdout  # the process is there, its insides are not
    assert done.stdout.endswith("end\n") and done.stdout.count("\n") == 2, done.stdout
    assert done.stderr.count("Permission denied") >= 4, done.stderr


async def test_memory_beyond_memory_mb_cannot_be_allocated(wss: mwc.Workspaces) -> None:
    ws = await wss.create(resources={"memory_mb": 128})
    done = await ws.exec("python3 -c 'b = bytearray(1 << 30); print(\"allocated\")'")
    assert "allocated" not in done.stdout
    assert "MemoryError" in done.stderr


@needs_root
async def test_processes_are_bounded_per_workspace_and_others_keep_working(
    wss: mwc.Workspaces,
) -> None:
    bomb = await wss.create()
    other = await wss.create()
    code = (
        "import os, time\nn = 0\ntry:\n    while n < 5000:\n        if os.fork() == 0:\n"
        "            time.sleep(3); os._exit(0)\n        n += 1\n"
        "except OSError:\n    pass\nprint(n)\n"
    )
    await bomb.file_write("bomb.py", code)
    done = await bomb.exec("python3 bomb.py")
    assert 100 < int(done.stdout) < 1100
    assert (await other.exec("echo alive")).stdout == "alive\n"


@needs_root
async def test_inotify_instances_are_bounded_per_workspace(wss: mwc.Workspaces) -> None:
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None)\nfds = []\n"
        "while len(fds) < 1000:\n    fd = libc.inotify_init()\n    if fd < 0:\n        break\n"
        "    fds.append(fd)\nprint(len(fds), flush=True)\n"
    )
    hog = await wss.create()
    await hog.file_write("hog.py", code + "import time; time.sleep(20)\n")
    started = await hog.realtime_exec_start("python3 hog.py > taken.txt")
    other = await wss.create()
    await other.file_write("count.py", code)
    await asyncio.sleep(1.0)
    counted = await other.exec("python3 count.py")
    taken = (await hog.exec("cat taken.txt")).stdout
    await hog.realtime_exec_cancel(started.exec_id)
    assert taken == "32\n"
    # The hog took what its namespace allows (32), and the other workspace still gets its own.
    assert int(counted.stdout) == 32
    watch = await other.file_watch_start(path=".")
    assert watch.watch_id.startswith("fw-")


async def test_resources_the_local_driver_cannot_enforce_are_refused(wss: mwc.Workspaces) -> None:
    # (Lifetimes and idle limits are enforced: the lifecycle sweep suspends the workspace.)
    for resources in ({"cpu": 2.0}, {"gpu": "A10G"}):
        with pytest.raises(mwc.WorkspaceError) as refused:
            await wss.create(resources=resources)
        assert "cannot be enforced" in str(refused.value)


# --- 5. routing the workspace cannot redirect ----------------------------------------------


async def test_a_socket_symlinked_to_another_workspace_is_refused(wss: mwc.Workspaces) -> None:
    driver = wss.service.driver
    assert isinstance(driver, LocalDriver)
    a = await wss.create()
    b = await wss.create()
    await b.file_write("whose.txt", "b's file\n")
    sock_a = driver.data_root / a.id / "run" / "agent.sock"
    sock_b = driver.data_root / b.id / "run" / "agent.sock"
    # What a command could do where it reaches the socket's directory: point A's socket at B's.
    sock_a.unlink()
    sock_a.symlink_to(sock_b)
    with pytest.raises(mwc.WorkspaceError):
        await a.file_read("whose.txt")


async def test_the_agent_serves_no_peer_without_the_channel_key(wss: mwc.Workspaces) -> None:
    driver = wss.service.driver
    assert isinstance(driver, LocalDriver)
    ws = await wss.create()
    sock = driver.data_root / ws.id / "run" / "agent.sock"
    for key in (None, "00" * 32):
        with local_daemon.connectable(sock) as path, pytest.raises(AgentError) as refused:
            client = await AgentClient.connect_unix(path, key=key)
            try:
                await client.request("exec.start", {"command": "echo forged"})
            finally:
                await client.close()
        # Refused outright, or cut off before the request was read; either way not served.
        assert refused.value.code in ("permission", "unavailable"), refused.value
    listed = await ws.realtime_exec_list()
    assert listed.execs == []


async def test_terminate_ends_processes_that_left_the_marker_behind(tmp_path: Path) -> None:
    driver = LocalDriver(tmp_path / "data", isolation="none")
    async with mwc.Workspaces(driver=driver) as wss:
        ws = await wss.create()
        tag = f"mwc-escape-{secrets.token_hex(4)}"
        await ws.exec(
            f"env -u MODAL_WORKSPACE_ID setsid bash -c 'exec -a {tag} sleep 300' "
            ">/dev/null 2>&1 < /dev/null &"
        )
        await asyncio.sleep(0.3)
        assert _pids_named(tag)
        await ws.terminate()
        assert not _pids_named(tag)


def _pids_named(name: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.joinpath("cmdline").read_bytes().split(b"\0")[0] == name.encode():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@needs_root
async def test_a_workspace_that_fills_its_disk_gets_enospc_and_others_keep_theirs(
    tmp_path: Path,
) -> None:
    driver = LocalDriver(tmp_path / "data", isolation="bwrap", disk_mb=64)
    async with mwc.Workspaces(driver=driver) as wss:
        full = await wss.create()
        other = await wss.create()
        done = await full.exec(
            "head -c 200000000 /dev/zero > /workspace/big; echo $?; "
            "head -c 200000000 /dev/zero > /tmp/big; head -c 200000000 /dev/zero > ~/big"
        )
        assert done.stdout.strip() != "0"
        assert done.stderr.count("No space left on device") == 3, done.stderr
        with pytest.raises(mwc.WorkspaceError) as refused:
            await full.file_write("more.txt", "x" * 1_000_000)
        assert "space" in str(refused.value).lower()
        assert (await other.exec("head -c 1000000 /dev/zero > f && wc -c < f")).stdout == (
            "1000000\n"
        )
        for ws in (full, other):
            await ws.terminate()
    assert not any(tmp_path.glob("data/ws-*"))


# --- 6. records the gateway relies on --------------------------------------------------------


async def test_a_forged_pending_record_makes_a_restarted_gateway_record_no_repo_tags(
    tmp_path: Path,
) -> None:
    settings = load_settings({}, data_root=tmp_path / "data")
    async with mwc.Workspaces(settings=settings) as first:
        ws = await first.create(keep=True)  # for the restarted gateway to find
        # Any exec that succeeded, and a record in the workspace claiming it was a clone.
        done = await ws.realtime_exec_start("true")
        _ = [e async for e in ws.follow(done.exec_id)]
        forged = {
            "exec_id": done.exec_id,
            "tags": {"repo-url": "https://github.com/evil/repo.git", "repo-path": "evil"},
            "askpass": None,
        }
        await ws.file_write(f".mwc/pending-{done.exec_id}.json", json.dumps(forged))
    async with mwc.Workspaces(settings=settings) as second:
        again = await second.get(ws.id)
        try:
            # The restarted gateway settles what the agent's own records say is owed (nothing
            # here); a file in the workspace is not one of them.
            await again.exec("true")
            listed, _ = await second.service.request(ws.id, "exec.notes", {})
            assert listed["execs"] == []
            await asyncio.sleep(0.5)
            assert "repo-url" not in (await again.refresh()).tags
        finally:
            await again.terminate()
