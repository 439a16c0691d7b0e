"""A workspace's pasta, from its start to its end, which is its sandbox's.

bwrap's sandbox ends with its init; pasta, a host process attached to the sandbox's network
namespace, does not: it holds the namespace (and one of the host user's inotify instances) until
something ends it. Debian bookworm's pasta (2023-03) has nothing that ties it to the namespace's
owner (it quits with a namespace bound in a filesystem, and a /proc path is not one), so the
gateway does, twice over:

- a watcher (`sandbox_watch.py`), started with it, kills it as soon as the sandbox's init ends,
  whatever ended it and whether a gateway runs then or not; it lives in a session of its own,
  so a gateway's end or restart ends neither it nor pasta;
- a gateway's start and its lifecycle sweep (`end_strays`) end what a crash left (a watcher
  killed with its sandbox): every pasta recorded in a workspace's pid file whose sandbox is
  gone.

A pasta is recognised by its pid file (in the workspace's directory of the data root, which no
sandbox mounts), by its command line, which names that very pid file and the namespace of the
sandbox's init, and by the workspace's marker in its environment: never by its name alone. It is
signalled through a pidfd opened before it was recognised, so a pid reused meanwhile is never
signalled.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from . import daemon

# In the workspace's directory: pasta writes its pid there (`--pid`), for the gateway only.
PID_FILE = "pasta.pid"
_WATCHER = Path(__file__).with_name("sandbox_watch.py")
_NETNS = re.compile(rb"/proc/([0-9]+)/ns/net")


def pid_file(workspace_dir: Path) -> Path:
    return workspace_dir / PID_FILE


def sandbox_of(pid: int, pid_file: Path) -> int | None:
    """The pid of the sandbox init whose network namespace pasta `pid` serves, when `pid` is a
    pasta started with `pid_file`; None for any other process."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if not os.path.basename(argv[0]).startswith(b"pasta"):
        return None
    options = dict(itertools.pairwise(argv[1:]))  # each argument and the next
    if options.get(b"--pid") != os.fsencode(pid_file):
        return None
    found = _NETNS.fullmatch(options.get(b"--netns", b""))
    return int(found.group(1)) if found else None


def watch(
    sandbox: int, sandbox_pid: int, pid_file: Path, env: Mapping[str, str], output: int
) -> None:
    """Starts the watcher that ends the pasta recorded in `pid_file` when the sandbox ends:
    `sandbox` is a pidfd of the sandbox's init (`sandbox_pid`). Raises OSError when the pid
    file names no pasta of that sandbox."""
    pid = _recorded(pid_file)
    if pid is None:
        raise FileNotFoundError(f"pasta wrote no pid to {pid_file.name}")
    helper = os.pidfd_open(pid)
    try:
        if sandbox_of(pid, pid_file) != sandbox_pid:
            raise ProcessLookupError(f"the pid in {pid_file.name} is not the sandbox's pasta")
        argv = [sys.executable, "-I", "-S", str(_WATCHER), str(sandbox), str(helper)]
        proc = daemon.detached_popen(
            argv,
            env,
            cwd=Path("/"),
            stdin=subprocess.DEVNULL,
            output=output,
            pass_fds=(sandbox, helper),
        )
        daemon.keep_for_reaping(proc)
    finally:
        os.close(helper)


def end(pid_file: Path) -> None:
    """Ends the pasta recorded in `pid_file`, if one runs."""
    _end_recorded(pid_file, None, orphaned_only=False)


def end_strays(data_root: Path, marker: Callable[[str], str]) -> list[str]:
    """Ends every workspace's pasta whose sandbox is gone (`marker`: the variable, `NAME=value`,
    that every process of a workspace of that id carries); returns those workspaces' ids."""
    ended = []
    for path in sorted(data_root.glob("ws-*")):
        if _end_recorded(pid_file(path), marker(path.name), orphaned_only=True):
            ended.append(path.name)
    return ended


def _recorded(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def _end_recorded(pid_file: Path, marker: str | None, *, orphaned_only: bool) -> bool:
    pid = _recorded(pid_file)
    if pid is None:
        return False
    try:
        handle = os.pidfd_open(pid)
    except OSError:
        return False  # ended already
    try:
        sandbox = sandbox_of(pid, pid_file)
        if sandbox is None or (marker is not None and not _carries(pid, marker)):
            return False
        if orphaned_only and _older_and_alive(sandbox, pid):
            return False
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(handle, signal.SIGKILL)
        return True
    finally:
        os.close(handle)


def _carries(pid: int, marker: str) -> bool:
    """Whether the environment of `pid` holds `marker`; one this user may not read (another
    user's pasta could not have written the pid file) counts by its command line alone."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except PermissionError:
        return True
    except OSError:
        return False
    return marker.encode() in environ.split(b"\0")


def _older_and_alive(sandbox: int, pasta: int) -> bool:
    """Whether process `sandbox` runs and started no later than `pasta`: the init pasta was
    started for (a process that took its pid later started after it ended)."""
    started = daemon.start_time(sandbox)
    attached = daemon.start_time(pasta)
    return started is not None and attached is not None and int(started) <= int(attached)
