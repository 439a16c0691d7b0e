"""Nothing the host starts for a workspace outlives the workspace's sandbox (docs/security.md,
property 3): its pasta, which holds the sandbox's network namespace and one of the host user's
inotify instances, ends whenever the sandbox ends, whatever ended it (a command, a crash, the
kernel), whether a gateway runs then or not. A gateway's end or restart ends none of it:
workspaces outlive gateways.

Every case runs real processes: `modal-workspace serve`, bubblewrap, pasta, the agent. The host's
view (/proc, as root every process's environment) finds a workspace's processes by its marker
variable. Each wait is bounded: a helper left running fails the test, it never hangs it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import pytest
from modal_workspace_core.drivers.local.bubblewrap import probe
from modal_workspace_core.drivers.local.bubblewrap_launch import network_problem
from support.loopback import loopback_listener
from support.processes import pid_alive, processes_of

from .gateway import AUTH, Gateway, gateway

ISOLATION = probe()
NETWORK_PROBLEM = (
    network_problem(ISOLATION.bwrap, ISOLATION.pasta)
    if ISOLATION.enabled and ISOLATION.bwrap and ISOLATION.pasta
    else f"needs bubblewrap and pasta: {ISOLATION}"
)
pytestmark = pytest.mark.skipif(
    NETWORK_PROBLEM is not None, reason=f"workspaces get no network here: {NETWORK_PROBLEM}"
)

# How long a helper may take to end once its sandbox has: far more than it needs, a bound only.
BOUND = 30.0
# No lifecycle sweep, so that what ends the helpers is what the test means to check.
NO_SWEEP = {"MODAL_WORKSPACE_JANITOR_SECONDS": "0"}

Identity = tuple[int, str]  # a pid and its start time: a reused pid is another process


def _stat(pid: int) -> list[str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2 :].split()


def _identity(pid: int) -> Identity | None:
    fields = _stat(pid)
    return (pid, fields[19]) if fields and pid_alive(pid) else None


def _running(identities: list[Identity]) -> list[Identity]:
    return [i for i in identities if _identity(i[0]) == i]


def _argv(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def _processes(workspace_id: str) -> list[Identity]:
    """Every live process of the workspace, host side and sandbox alike."""
    found = (_identity(pid) for pid in processes_of(workspace_id))
    return [i for i in found if i is not None]


def _pastas(workspace_id: str) -> list[Identity]:
    return [
        i for i in _processes(workspace_id) if Path(os.fsdecode(_argv(i[0])[0])).name == "pasta"
    ]


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        found.append(pid := todo.pop())
        todo += children.get(pid, [])
    return found


def _sandbox(gw: Gateway, workspace_id: str) -> list[int]:
    """The recorded bwrap, the sandbox's init below it and everything below that."""
    recorded = json.loads((gw.data_root / workspace_id / "agent.pid").read_text())
    return _descendants(int(recorded["pid"]))


def _agent(gw: Gateway, workspace_id: str) -> int:
    """The workspace's agent daemon: the bwrap processes above it are not."""
    for pid in _sandbox(gw, workspace_id):
        argv = _argv(pid)
        program = Path(os.fsdecode(argv[0])).name
        if program != "bwrap" and b"modal_workspace_core.agent" in argv and b"daemon" in argv:
            return pid
    raise AssertionError(f"no agent runs for {workspace_id}")


def _wait_until(done: Callable[[], bool], what: Callable[[], str]) -> None:
    deadline = time.monotonic() + BOUND
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"still there after {BOUND:.0f} s: {what()}")
        time.sleep(0.05)


def _describe(identities: list[Identity]) -> str:
    return "; ".join(
        f"{pid}: {b' '.join(_argv(pid)).decode(errors='replace')[:160]}" for pid, _ in identities
    )


def _wait_for_the_end_of(identities: list[Identity]) -> None:
    _wait_until(lambda: not _running(identities), lambda: _describe(_running(identities)))


def _kill(identities: list[Identity]) -> None:
    for pid, start in identities:
        if _identity(pid) == (pid, start):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def leftovers(tmp_path: Path) -> Iterator[list[str]]:
    """Workspace ids whose every process the test ends in the end, whatever it found (a pasta
    left running would hold one of root's inotify instances for good); then a gateway on the
    data root ends the workspaces a killed gateway left, disks and all."""
    ids: list[str] = []
    yield ids
    for workspace_id in ids:
        _kill(_processes(workspace_id))
    if any((tmp_path / "data").glob("ws-*")):
        with gateway(tmp_path, env=NO_SWEEP):
            pass


def _create(client: httpx2.Client, gw: Gateway, leftovers: list[str]) -> str:
    response = client.post(gw.url("/api/workspaces"), headers=AUTH, json={})
    assert response.status_code == 200, response.text
    workspace_id = str(response.json()["workspace_id"])
    leftovers.append(workspace_id)
    return workspace_id


def _exec(client: httpx2.Client, gw: Gateway, workspace_id: str, command: str) -> str:
    url = gw.url(f"/api/workspaces/{workspace_id}/exec")
    response = client.post(url, headers=AUTH, json={"command": command})
    assert response.status_code == 200, response.text
    return str(response.json()["stdout"])


def _networked(workspace_id: str) -> list[Identity]:
    """The workspace's pasta, which must be there for the test to mean anything."""
    pastas = _pastas(workspace_id)
    assert len(pastas) == 1, _describe(_processes(workspace_id))
    return pastas


def _crash_all_but_pasta(gw: Gateway, workspace_id: str, *, gateway_too: bool) -> list[Identity]:
    """What a crash of the host's processes leaves (the OOM killer, a `kill -9` of a service's
    processes that missed one): every process of the workspace but its pasta killed, whatever
    the host runs beside the sandbox first (so that nothing watching the sandbox sees it end),
    then the sandbox. Returns the pasta, still running."""
    pastas = _networked(workspace_id)
    if gateway_too:
        os.kill(gw.pid, signal.SIGKILL)
    in_sandbox = set(_sandbox(gw, workspace_id))
    everything = _processes(workspace_id)
    beside = [i for i in everything if i not in pastas and i[0] not in in_sandbox]
    _kill(beside)
    _wait_for_the_end_of(beside)
    sandbox = [i for i in everything if i[0] in in_sandbox]
    _kill(sandbox)
    _wait_for_the_end_of(sandbox)
    assert _running(pastas) == pastas, "the crash ended pasta too: the test checks nothing"
    return pastas


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="as root the agent runs as a uid no command may signal; the next test kills it "
    "from the host as the kernel's OOM killer would",
)
def test_pasta_ends_when_a_command_kills_its_agent(tmp_path: Path, leftovers: list[str]) -> None:
    with gateway(tmp_path, env=NO_SWEEP) as gw, httpx2.Client(timeout=60) as client:
        workspace_id = _create(client, gw, leftovers)
        before = _processes(workspace_id)
        pastas = _networked(workspace_id)
        # Every process the command may signal, its agent among them: the sandbox ends with it.
        url = gw.url(f"/api/workspaces/{workspace_id}/realtime-execs")
        started = client.post(url, headers=AUTH, json={"command": "sleep 0.2; kill -KILL -1"})
        assert started.status_code == 200, started.text
        _wait_for_the_end_of(pastas)
        _wait_for_the_end_of(before)


def test_pasta_ends_when_the_agent_is_killed_while_the_gateway_runs(
    tmp_path: Path, leftovers: list[str]
) -> None:
    with gateway(tmp_path, env=NO_SWEEP) as gw, httpx2.Client(timeout=60) as client:
        workspace_id = _create(client, gw, leftovers)
        before = _processes(workspace_id)
        pastas = _networked(workspace_id)
        os.kill(_agent(gw, workspace_id), signal.SIGKILL)
        # Nothing asks for the workspace meanwhile: no restart of its agent ends the old pasta.
        _wait_for_the_end_of(pastas)
        _wait_for_the_end_of(before)


def test_pasta_ends_with_its_sandbox_when_no_gateway_runs(
    tmp_path: Path, leftovers: list[str]
) -> None:
    with gateway(tmp_path, env=NO_SWEEP) as gw, httpx2.Client(timeout=60) as client:
        workspace_id = _create(client, gw, leftovers)
        before = _processes(workspace_id)
        pastas = _networked(workspace_id)
        os.kill(gw.pid, signal.SIGKILL)
        time.sleep(0.2)
        # The workspace outlives its gateway, pasta and all.
        assert _running(before) == before
        os.kill(_agent(gw, workspace_id), signal.SIGKILL)
        _wait_for_the_end_of(pastas)
        _wait_for_the_end_of(before)


def test_a_new_gateway_ends_the_pasta_a_crash_left_behind(
    tmp_path: Path, leftovers: list[str]
) -> None:
    with gateway(tmp_path, env=NO_SWEEP) as gw, httpx2.Client(timeout=60) as client:
        workspace_id = _create(client, gw, leftovers)
        pastas = _crash_all_but_pasta(gw, workspace_id, gateway_too=True)
    # A gateway started on the same data root, before any request names the workspace.
    with gateway(tmp_path, env=NO_SWEEP):
        _wait_for_the_end_of(pastas)


def test_the_sweep_ends_the_pasta_of_a_sandbox_that_ended(
    tmp_path: Path, leftovers: list[str]
) -> None:
    # The sandbox ends while the gateway serves, after its start looked.
    sweep = {"MODAL_WORKSPACE_JANITOR_SECONDS": "1"}
    with gateway(tmp_path, env=sweep) as gw, httpx2.Client(timeout=60) as client:
        workspace_id = _create(client, gw, leftovers)
        pastas = _crash_all_but_pasta(gw, workspace_id, gateway_too=False)
        _wait_for_the_end_of(pastas)


def test_a_gateway_restart_leaves_a_running_workspace_its_network(
    tmp_path: Path, leftovers: list[str]
) -> None:
    with loopback_listener() as port:
        env = {"MODAL_WORKSPACE_HOST_PORTS": str(port), "MODAL_WORKSPACE_JANITOR_SECONDS": "1"}
        connect = f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected'"
        with gateway(tmp_path, env=env) as gw, httpx2.Client(timeout=60) as client:
            workspace_id = _create(client, gw, leftovers)
            before = _processes(workspace_id)
            assert _exec(client, gw, workspace_id, connect) == "connected\n"
            agent = json.loads((gw.data_root / workspace_id / "agent.pid").read_text())
            os.kill(gw.pid, signal.SIGKILL)
        with gateway(tmp_path, env=env) as gw, httpx2.Client(timeout=60) as client:
            # The same sandbox, its pasta and its agent, with a network that still works.
            assert _exec(client, gw, workspace_id, connect) == "connected\n"
            assert json.loads((gw.data_root / workspace_id / "agent.pid").read_text()) == agent
            assert _running(_networked(workspace_id)) == _networked(workspace_id)
            assert set(_running(before)) <= set(_processes(workspace_id))
            assert _networked(workspace_id)[0] in before
