"""The local driver's agent daemons: start one detached, find it again, stop it.

A daemon outlives the server that started it (its own session, no tie to the parent), so a
process id file with the process's start time lets a restarted server recognise it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .store import write_json_atomic

# Linux allows 108 bytes for a unix socket path; above this the gateway connects through the
# socket's directory opened as a file descriptor instead.
_MAX_SOCKET_PATH = 100
_LOG_ROTATE_BYTES = 1 << 20


@dataclass(frozen=True)
class DaemonProcess:
    """A started daemon: the leader of its own session and process group."""

    pid: int
    start_time: str  # the kernel's start time of `pid`, which tells a reused pid apart


class DaemonStartError(RuntimeError):
    """The daemon exited or did not listen in time; the message carries its log's end."""


Spawn = Callable[[int], "subprocess.Popen[bytes]"]


def detached_popen(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: Path,
    stdin: int,
    output: int,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """`argv` in a session of its own, output to the log, no descriptor but `pass_fds`."""
    return subprocess.Popen(
        list(argv),
        env=dict(env),
        cwd=cwd,
        stdin=stdin,
        stdout=output,
        stderr=output,
        pass_fds=tuple(pass_fds),
        # Its own session: the server's terminal signals (Ctrl-C) and its exit do not reach
        # the daemon, and the session's process group is what `stop` signals.
        start_new_session=True,
        close_fds=True,
    )


def spawn_detached(argv: Sequence[str], env: Mapping[str, str], *, cwd: Path, stdin: int) -> Spawn:
    """The plain way to start a daemon: `argv` detached (`detached_popen`), output to the log."""

    def spawn(output: int) -> subprocess.Popen[bytes]:
        return detached_popen(argv, env, cwd=cwd, stdin=stdin, output=output)

    return spawn


def start(
    spawn: Spawn,
    *,
    log: Path,
    pid_file: Path,
    socket_path: Path,
    timeout: float,
) -> DaemonProcess:
    """Start a daemon with `spawn` (given the log's descriptor) and wait until it accepts
    connections on `socket_path`."""
    if log.exists() and log.stat().st_size > _LOG_ROTATE_BYTES:
        log.replace(log.with_name(log.name + ".1"))
    with log.open("ab") as out:
        try:
            proc = spawn(out.fileno())
        except (OSError, RuntimeError) as err:
            raise DaemonStartError(f"{err}: {_tail(log)}") from err
    daemon = DaemonProcess(proc.pid, start_time(proc.pid) or "")
    write_json_atomic(pid_file, {"pid": daemon.pid, "start_time": daemon.start_time})
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        if proc.poll() is not None:
            raise DaemonStartError(
                f"the workspace agent exited with status {proc.returncode} while starting: "
                f"{_tail(log)}"
            )
        if accepts(socket_path):
            # The Popen object is dropped: Python reaps the daemon if it ends while the server
            # still runs, and init does after the server has gone.
            keep_for_reaping(proc)
            return daemon
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.pid, signal.SIGKILL)  # its own group, just made
            proc.wait()
            raise DaemonStartError(
                f"the workspace agent did not listen within {timeout:.0f} s: {_tail(log)}"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def running(pid_file: Path) -> DaemonProcess | None:
    """The daemon recorded in `pid_file` if that very process is still alive."""
    daemon = _read_pid_file(pid_file)
    if daemon is None:
        return None
    _reap()
    return daemon if start_time(daemon.pid) == daemon.start_time else None


def stop(pid_file: Path, marker: str, *, grace: float = 10.0) -> None:
    """Stop the recorded daemon, then every process of the workspace.

    `marker` (`NAME=value`) is in the environment of every process of the workspace: it tells
    them apart from strangers that may have inherited a pid. The daemon's process group gets
    SIGTERM so the daemon can end cleanly; whatever remains then gets SIGKILL: under bwrap the
    sandbox's init (which outlives the daemon while any command lives, and whose end ends them
    all), without bwrap the commands, which run in sessions of their own.
    """
    recorded = _read_pid_file(pid_file)
    if recorded is not None and start_time(recorded.pid) == recorded.start_time:
        # The daemon is a subreaper: whatever its commands started, even in sessions of their
        # own and without the marker, stays among its descendants while it lives. Those go
        # first, before the daemon's end could hand them to init.
        _kill_tree_below(recorded.pid)
    if recorded is not None:
        group = [pid for pid in _marked(marker) if _group_of(pid) == recorded.pid]
        _signal_all(group, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            _reap()
            # bwrap ignores SIGTERM (or dies of it); the daemon is what is given time.
            if all(_command_of(pid) in ("bwrap", None) for pid in group):
                break
            time.sleep(0.02)
    while remaining := _marked(marker):
        _signal_all(remaining, signal.SIGKILL)
        _reap()
        time.sleep(0.02)
    with contextlib.suppress(FileNotFoundError):
        pid_file.unlink()


def check_peer(pid_file: Path, sock: socket.socket) -> None:
    """Raises OSError unless the process listening at the other end of `sock` is the daemon
    recorded in `pid_file`: that process itself (unisolated), or the child of the sandbox's init
    that the recorded bwrap started (isolated), running as this process's uid. A command of the
    workspace cannot pass: it runs as another uid, or (without one) below the daemon, which is a
    subreaper, so never as a child of the init. A socket planted elsewhere, or a symlink to
    another workspace's, fails the same way."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    recorded = running(pid_file)
    if recorded is None:
        raise ConnectionRefusedError("the workspace's agent is not running")
    if uid != os.geteuid():
        raise PermissionError(f"the process behind the agent's socket runs as uid {uid}")
    if pid == recorded.pid:
        return
    parent = _parent_of(pid)
    if parent is not None and _parent_of(parent) == recorded.pid:
        return
    raise PermissionError("the process behind the agent's socket is not the workspace's agent")


def agent_stopped(pid_file: Path, *, isolated: bool) -> bool:
    """Whether the recorded daemon, or the sandbox processes between it and the gateway, are
    stopped (state T) or traced (t): such an agent never answers again until continued. Its
    commands (below the daemon) are theirs to stop."""
    recorded = running(pid_file)
    if recorded is None:
        return False
    chain = [recorded.pid]
    below = [recorded.pid]
    children = _children()
    # Isolated, the recorded bwrap, its sandbox's init, then the daemon; else the daemon itself.
    for _ in range(2 if isolated else 0):
        below = [child for pid in below for child in children.get(pid, [])]
        chain += below
    return any((_stat(pid) or ["?"])[0] in ("T", "t") for pid in chain)


def _parent_of(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[1]) if fields else None  # field 4: the parent


def accepts(socket_path: Path) -> bool:
    """Whether something listens on `socket_path` (connects and closes at once)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock, connectable(socket_path) as p:
        sock.settimeout(5.0)
        try:
            sock.connect(p)
        except OSError:
            return False
    return True


@contextlib.contextmanager
def connectable(socket_path: Path) -> Iterator[str]:
    """A path to connect to `socket_path` by, short enough for the kernel's limit: the path
    itself, or the socket's name under its directory opened as a descriptor (`/proc/self/fd`)."""
    text = str(socket_path)
    if len(os.fsencode(text)) <= _MAX_SOCKET_PATH:
        yield text
        return
    fd = os.open(socket_path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{socket_path.name}"
    finally:
        os.close(fd)


class SocketPaths:
    """Lasting paths to reach sockets by, for clients that reconnect by path: the path itself
    when it is short enough, else the socket's name under its directory held open here."""

    def __init__(self) -> None:
        self._dirs: dict[Path, int] = {}

    def get(self, socket_path: Path) -> str:
        if fits_socket_path(socket_path):
            return str(socket_path)
        fd = self._dirs.get(socket_path.parent)
        if fd is None:
            fd = os.open(socket_path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            self._dirs[socket_path.parent] = fd
        return f"/proc/self/fd/{fd}/{socket_path.name}"

    def forget(self, socket_path: Path) -> None:
        fd = self._dirs.pop(socket_path.parent, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()


# The longest name the daemon gives a socket beside its own (`PATH.askpass`, for git's
# authenticated steps): every socket it listens on must fit the kernel's limit.
_LONGEST_SOCKET_SUFFIX = ".askpass"


def fits_socket_path(socket_path: Path) -> bool:
    longest = os.fsencode(str(socket_path) + _LONGEST_SOCKET_SUFFIX)
    return len(longest) <= _MAX_SOCKET_PATH


def _read_pid_file(pid_file: Path) -> DaemonProcess | None:
    try:
        data = json.loads(pid_file.read_text())
        return DaemonProcess(int(data["pid"]), str(data["start_time"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _marked(marker: str) -> list[int]:
    """Pids of this user's live processes whose environment holds `marker`."""
    needle = b"\0" + marker.encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = b"\0" + (entry / "environ").read_bytes()
        except OSError:
            continue  # not ours, or gone
        if needle in environ and _stat(int(entry.name)) is not None:
            found.append(int(entry.name))
    return found


def _kill_tree_below(root: int) -> None:
    """SIGKILL every descendant of `root`, until none is left (a fork racing the kill is
    caught by the next round)."""
    for _ in range(100):
        below = _descendants(root)
        if not below:
            return
        _signal_all(below, signal.SIGKILL)
        time.sleep(0.01)


def _children() -> dict[int, list[int]]:
    """Every live process's children, by parent pid."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def _descendants(root: int) -> list[int]:
    children = _children()
    found: list[int] = []
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _stat(pid: int) -> list[str] | None:
    # The fields of /proc/PID/stat from the third on (state, ppid, pgrp, …): the command name
    # before them is parenthesised and may hold spaces. A zombie counts as ended.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return fields


def start_time(pid: int) -> str | None:
    """When `pid` started (clock ticks since boot), None once it has ended: with the pid, it
    names one process."""
    fields = _stat(pid)
    return fields[19] if fields else None  # field 22: start time in clock ticks since boot


def _group_of(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[2]) if fields else None  # field 5: the process group


def _command_of(pid: int) -> str | None:
    if _stat(pid) is None:
        return None
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


_started: list[subprocess.Popen[bytes]] = []


def keep_for_reaping(proc: subprocess.Popen[bytes]) -> None:
    """Keeps `proc` to be waited for once it ends (a process this one started and dropped)."""
    _started.append(proc)


def _reap() -> None:
    # Daemons started by this process become zombies when they end until waited for.
    _started[:] = [p for p in _started if p.poll() is None]


def _tail(log: Path, limit: int = 600) -> str:
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - limit))
            text = f.read().decode(errors="replace").strip()
    except OSError:
        return "(no log)"
    return text or "(its log is empty)"
