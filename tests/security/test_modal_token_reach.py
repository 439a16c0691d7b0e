"""On Modal the agent is the sandbox's root, and a root command can read any process's memory
there, the git step's that holds a push token included. So commands run as an unprivileged user
of their own by default, and a workspace that chooses root commands (`resources.run_as_root`) is
never handed a token (issue: the workspace as a boundary, point 3; docs/modal.md, "Who runs
commands").

On the Modal driver against the test control plane, whose sandboxes run as root like Modal's.
"""

from __future__ import annotations

import os
import sys

import pytest
from modal_control_plane import modal_control_plane
from modal_service_support import allowed_secrets, idle_seconds, needs_container_paths, workspaces
from modal_workspace_core.drivers.command_user import COMMAND_HOME, COMMAND_UID
from modal_workspace_core.errors import PermissionDeniedError
from modal_workspace_core.surfaces.python_client import Workspace, Workspaces
from support.git_server import GitServer

# The fixtures, imported for pytest to find.
__all__ = ["allowed_secrets", "idle_seconds", "modal_control_plane", "workspaces"]

pytestmark = [
    needs_container_paths,
    pytest.mark.skipif(os.geteuid() != 0, reason="a sandbox's agent is root on Modal: run as root"),
]

# Reads every process's environment, argv and memory it can open, looking for the needle (a
# file, so that no argv of its own holds it), until /tmp/stop appears; prints how often it
# found it and how many processes of other users it could read the memory of.
SCRAPER = r"""
import os, re, sys
needle = open("/tmp/needle", "rb").read().strip()
found, readable = 0, set()
def scan(pid):
    global found
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return
    for name in ("environ", "cmdline"):
        try:
            found += open(f"/proc/{pid}/{name}", "rb").read().count(needle)
        except OSError:
            pass
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", buffering=0)
    except OSError:
        return
    with mem:
        for line in maps:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if "r" not in line.split()[1] or hi - lo > 64 << 20:
                continue
            try:
                mem.seek(lo)
                chunk = mem.read(hi - lo)
            except (OSError, ValueError, OverflowError):
                continue
            if uid != os.getuid():
                readable.add(pid)
            found += chunk.count(needle)
while not os.path.exists("/tmp/stop"):
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            scan(pid)
print(f"found={found} others_readable={len(readable)}")
"""


async def _exec(ws: Workspace, command: str) -> str:
    result = await ws.exec(command)
    assert result.returncode == 0, (command, result.stdout, result.stderr)
    return result.stdout


async def test_commands_run_as_a_user_of_their_own_with_a_home_and_their_files(
    workspaces: Workspaces,
) -> None:
    ws = await workspaces.create()

    assert await _exec(ws, "id -u; id -g") == f"{COMMAND_UID}\n{COMMAND_UID}\n"
    # The control plane shows the host's /home read-only: the agent's fallback home, theirs.
    home = (await _exec(ws, 'echo "$HOME"; echo kept > ~/note; stat -c %u ~')).split()
    assert home[1] == str(COMMAND_UID)
    # Their files: the root, what they write, and what the agent writes for them.
    await ws.file_write("by-agent.txt", "x")
    owners = await _exec(ws, "touch mine && stat -c %u /workspace mine by-agent.txt")
    assert owners.split() == [str(COMMAND_UID)] * 3
    # The agent's state is not theirs to read.
    listing = await ws.exec("ls /run/mwc/state/execs")
    assert listing.returncode != 0

    # A fork and a resume keep the user, its home and its files.
    fork = await workspaces.get((await ws.fork()).workspace_id)
    assert await _exec(fork, "id -u; cat ~/note; stat -c %u mine") == (
        f"{COMMAND_UID}\nkept\n{COMMAND_UID}\n"
    )


@pytest.mark.container_dirs("/workspace", "/run/mwc", "/home")
async def test_the_commands_home_is_home_workspace_where_the_image_lets_it_be(
    workspaces: Workspaces,
) -> None:
    ws = await workspaces.create()
    assert await _exec(ws, 'echo "$HOME $USER"; stat -c %u ~') == (
        f"{COMMAND_HOME} workspace\n{COMMAND_UID}\n"
    )


async def test_a_command_reading_every_process_memory_during_token_git_finds_no_token(
    workspaces: Workspaces, git_server: GitServer
) -> None:
    ws = await workspaces.create()
    await ws.file_write(".needle", git_server.token + "\n")
    await ws.file_write(".scraper.py", SCRAPER)
    scraper = await ws.realtime_exec_start(
        f"mv .needle /tmp/needle && exec {sys.executable} .scraper.py"
    )
    # A clone and a push, each holding the token in the agent's memory and its git's.
    clone = await ws.repo_clone("octo/hello", use_github_token=True)
    events = [e async for e in ws.follow(clone.exec_id)]
    status = await ws.realtime_exec_status(clone.exec_id)
    assert status.returncode == 0, [e.data for e in events]
    await _exec(ws, "cd hello && git checkout -q -b probe && echo 1 > probe && git add probe")
    await ws.repo_commit("probe", destination="/workspace/hello")
    pushed = await ws.repo_push(destination="/workspace/hello")
    assert pushed.pushed, pushed.error

    await _exec(ws, "touch /tmp/stop")
    events = [e async for e in ws.follow(scraper.exec_id)]
    out = "".join(e.data or "" for e in events if e.type in ("stdout", "stderr"))
    # It read its own user's processes and nobody else's: not the agent's, not its git's.
    assert out == "found=0 others_readable=0\n", out
    assert git_server.token in git_server.passwords


async def test_a_root_workspace_runs_commands_as_root_and_is_handed_no_token(
    workspaces: Workspaces, git_server: GitServer
) -> None:
    ws = await workspaces.create(resources={"run_as_root": True})
    assert (await ws.refresh()).resources["run_as_root"] is True
    assert await _exec(ws, "id -u") == "0\n"

    with pytest.raises(PermissionDeniedError, match="runs its commands as root"):
        await ws.repo_clone("octo/hello", use_github_token=True)
    base = git_server.gateway_env["MODAL_WORKSPACE_GITHUB_URL"].rstrip("/")
    await _exec(
        ws,
        f"git init -q -b main r && cd r && git remote add origin {base}/octo/hello && "
        "git -c user.name=a -c user.email=a@b.c commit -q --allow-empty -m x",
    )
    with pytest.raises(PermissionDeniedError, match="runs its commands as root"):
        await ws.repo_push(destination="/workspace/r")
    assert git_server.passwords == []

    # A fork is its parent's kind: root, and tokenless.
    fork = await workspaces.get((await ws.fork()).workspace_id)
    assert await _exec(fork, "id -u") == "0\n"
    with pytest.raises(PermissionDeniedError):
        await fork.repo_push(destination="/workspace/r")
