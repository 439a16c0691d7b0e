"""How a gateway recognises the pasta a crash left running (`drivers/local/pasta.py`): by the
workspace's pid file, the command line that names that pid file and the sandbox's namespace, and
the workspace's marker; never by a name alone. Stand-ins are real processes whose command line
and environment say what a pasta's would; the real pasta's whole life is in
tests/security/test_helper_lifetime.py."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from modal_workspace_core.drivers.local import pasta
from modal_workspace_core.drivers.local.record import process_marker
from support.processes import pid_alive

WORKSPACE = "ws-" + "a" * 32
OTHER = "ws-" + "b" * 32


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        process.kill()
        process.wait()


def _stand_in(
    started: list[subprocess.Popen[bytes]],
    *,
    name: str = "pasta",
    pid_file: Path,
    netns_pid: int,
    workspace_id: str = WORKSPACE,
) -> int:
    """A process whose command line is a pasta's (`name` first) and whose environment carries
    the marker of `workspace_id`; `; :` keeps bash from exec'ing sleep in its place."""
    argv = [name, "-c", "sleep 300; :", "--config-net", "--netns", f"/proc/{netns_pid}/ns/net"]
    argv += ["--pid", str(pid_file)]
    env = {"PATH": os.defpath, **dict([process_marker(workspace_id).split("=", 1)])}
    process = subprocess.Popen(argv, executable="/bin/bash", env=env)
    started.append(process)
    # Popen may return while the kernel still sets up the new program's arguments (its
    # command line reads empty until then): wait for them, as pasta's are long set when a
    # gateway reads its pid file.
    deadline = time.monotonic() + 30
    while not Path(f"/proc/{process.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the stand-in never showed its command line"
        time.sleep(0.01)
    return process.pid


def _ended_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def _record(data_root: Path, workspace_id: str, pid: int) -> Path:
    ws = data_root / workspace_id
    ws.mkdir(parents=True, exist_ok=True)
    pasta.pid_file(ws).write_text(f"{pid}\n")
    return pasta.pid_file(ws)


def test_the_pasta_of_an_ended_sandbox_is_ended(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    pid_file = pasta.pid_file(tmp_path / WORKSPACE)
    stray = _stand_in(started, pid_file=pid_file, netns_pid=_ended_pid())
    _record(tmp_path, WORKSPACE, stray)
    assert pasta.end_strays(tmp_path, process_marker) == [WORKSPACE]
    started[0].wait(timeout=30)
    assert not pid_alive(stray)


def test_a_pasta_whose_sandbox_runs_is_kept(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    # This process started before the stand-in: the sandbox it names still runs.
    pid_file = pasta.pid_file(tmp_path / WORKSPACE)
    serving = _stand_in(started, pid_file=pid_file, netns_pid=os.getpid())
    _record(tmp_path, WORKSPACE, serving)
    assert pasta.end_strays(tmp_path, process_marker) == []
    assert pid_alive(serving)


@pytest.mark.parametrize("impostor", ["named otherwise", "another pid file", "no marker", "sleep"])
def test_a_pid_file_ends_nothing_but_its_own_pasta(
    tmp_path: Path, started: list[subprocess.Popen[bytes]], impostor: str
) -> None:
    """Whatever the pid file names, only a process with a pasta's command line naming this
    very pid file, and with the workspace's marker, is ended."""
    own = pasta.pid_file(tmp_path / WORKSPACE)
    gone = _ended_pid()
    if impostor == "named otherwise":
        pid = _stand_in(started, name="not-pasta", pid_file=own, netns_pid=gone)
    elif impostor == "another pid file":
        other = pasta.pid_file(tmp_path / OTHER)
        pid = _stand_in(started, pid_file=other, netns_pid=gone)
    elif impostor == "no marker":
        pid = _stand_in(started, pid_file=own, netns_pid=gone, workspace_id=OTHER)
    else:
        process = subprocess.Popen(["sleep", "300"])
        started.append(process)
        pid = process.pid
    _record(tmp_path, WORKSPACE, pid)
    assert pasta.end_strays(tmp_path, process_marker) == []
    assert pid_alive(pid)
