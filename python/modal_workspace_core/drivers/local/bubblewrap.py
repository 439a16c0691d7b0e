"""Workspace isolation with bubblewrap: the `bwrap` argv that runs a command in a workspace.

Probes once whether `bwrap` works here (user namespaces may be unavailable inside containers)
and says why when it does not, so the local driver can run unisolated and report it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ...policy import WORKSPACE_ROOT
from ..command_user import COMMAND_HOME
from . import bubblewrap_etc

# What commands see. The workspace is their root and cwd, as on every driver.
# A home of the workspace's own, so nothing of the host user's home (dotfiles, credentials,
# caches) is visible and tools that write to `~` still work and keep their files.
SANDBOX_HOME = COMMAND_HOME
# The agent's state (exec logs) and its socket, outside `/workspace` so file operations and
# `git status` do not show them.
AGENT_STATE_DIR = "/run/agent/state"
AGENT_SOCKET_DIR = "/run/agent/sock"
# A /tmp in memory is bounded: without a disk of its own a workspace's /tmp is this large at most.
TMPFS_BYTES = 1 << 30
# A PATH that exists inside the sandbox: only system directories are mounted.
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The system's programs and libraries: read-only, and needed by any command at all. On merged
# /usr systems the top-level names are symlinks into /usr and are recreated as symlinks.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@dataclass(frozen=True)
class SandboxLayout:
    """The host directories of one workspace and what the sandbox must never show."""

    workspace: Path  # mounted read-write at WORKSPACE_ROOT
    home: Path  # mounted read-write at SANDBOX_HOME
    state: Path  # the agent's state dir, at AGENT_STATE_DIR
    socket_dir: Path  # the directory of the agent's socket, at AGENT_SOCKET_DIR
    # The directory mounted at /tmp (on the workspace's own disk); None gives a bounded tmpfs.
    tmp: Path | None = None
    # The files written for this sandbox's /etc (`sandbox_etc`), with their paths inside.
    etc_files: tuple[tuple[Path, str], ...] = ()
    block_network: bool = False
    # Host paths that must stay invisible even if a read-only mount would cover them (the data
    # root with every other workspace, the host user's home).
    hidden: tuple[Path, ...] = ()
    # Volumes: (host directory, path inside), each bound read-write over its own mount point
    # (`volumes`); none lies inside another.
    volumes: tuple[tuple[Path, str], ...] = ()
    # Root only: the user namespace's ids are mapped by the launcher (`bubblewrap_launch`), so that
    # the agent and the workspace's commands run as different host uids.
    mapped_ids: bool = False


@dataclass(frozen=True)
class LaunchFds:
    """The descriptors bwrap synchronises its start with (`bubblewrap_launch` holds the other
    ends): it reports its child's pid, then waits for the user namespace's id maps and for the
    network to be attached before it runs the command."""

    info: int
    block: int
    userns_block: int | None = None


@dataclass(frozen=True)
class Isolation:
    """Whether workspaces can be isolated here, with what, and why not when they cannot."""

    enabled: bool
    bwrap: str | None
    reason: str
    # pasta (Debian's `passt`), which gives isolated workspaces their network; without it they
    # are refused unless they block the network.
    pasta: str | None = None


def bwrap_argv(
    bwrap: str,
    layout: SandboxLayout,
    command: Sequence[str],
    *,
    readonly: Iterable[Path] = (),
    fds: LaunchFds | None = None,
) -> list[str]:
    """The argv that runs `command` isolated in the workspace of `layout`.

    `readonly` are extra host paths mounted read-only at the same place (the Python
    environment the agent runs from). Environment variables are NOT set here: they reach the
    command through bwrap's own environment, because an argv is readable by every process on the
    host (`/proc/*/cmdline`) and the environment may carry secrets.
    """
    argv = [bwrap]
    # New user, pid, ipc, uts, cgroup and network namespaces. The pid namespace hides the host's
    # processes (their argv and environment), and the end of its init (bwrap, which the driver
    # kills last when it stops a workspace) ends every process inside. The network namespace has
    # only a loopback of its own: the launcher attaches user-mode networking to it unless the
    # workspace blocks the network, so the host's loopback services are never on a route.
    argv += ["--unshare-all", "--unshare-net"]
    if fds is not None:
        argv += ["--info-fd", str(fds.info), "--block-fd", str(fds.block)]
    if layout.mapped_ids:
        assert fds is not None and fds.userns_block is not None
        # The agent is root of its user namespace with only the capabilities it needs to run
        # commands as their own uid (setuid, setgid), to signal them (kill), to watch
        # directories they made private (dac_read_search) and to hand its git directory to its
        # git uid (chown); commands get none.
        argv += ["--unshare-user", "--userns-block-fd", str(fds.userns_block)]
        argv += ["--uid", "0", "--gid", "0"]
        argv += ["--cap-drop", "ALL"]
        for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_DAC_READ_SEARCH", "CAP_CHOWN"):
            argv += ["--cap-add", cap]
    else:
        # No capabilities: nothing inside may mount, trace or change owners.
        argv += ["--cap-drop", "ALL"]
    argv += ["--hostname", "workspace"]
    # Deliberately absent: `--die-with-parent`, because the agent daemon must outlive the
    # server that starts it (a restarted server finds it again); and `--new-session`, because
    # the daemon has no terminal to protect and must stay in the process group the driver
    # signals to stop it.
    for name in _SYSTEM_DIRS:
        argv += _mirror_system_dir(name)
    # A constructed /etc: the files written for this sandbox and an allowlist of the host's
    # configuration that programs need, read-only (`sandbox_etc`).
    argv += ["--dir", "/etc"]
    for host_path, inside in (*layout.etc_files, *bubblewrap_etc.host_entries()):
        argv += ["--ro-bind", str(host_path), inside]
    argv += ["--symlink", "/proc/self/mounts", "/etc/mtab"]
    # A private /proc for the new pid namespace, a minimal /dev (null, zero, random, tty, pts,
    # shm) and a private /tmp that every user may write, so nothing is shared with the host's.
    argv += ["--proc", "/proc", "--dev", "/dev"]
    # /tmp before the Python environment's mounts below, which may lie under it.
    if layout.tmp is None:
        argv += ["--perms", "1777", "--size", str(TMPFS_BYTES), "--tmpfs", "/tmp"]
    else:
        argv += ["--bind", str(layout.tmp), "/tmp"]
    bound = [Path(p) for p in _SYSTEM_DIRS]
    made: set[Path] = set()
    for path in _minimal_cover(readonly):
        # Never the whole filesystem, nor a hidden path itself: masking it afterwards would
        # leave nothing of the mount.
        if _covered(path, bound) or path == Path("/") or path in layout.hidden:
            continue
        # The Python environment, read-only at its own path, so the agent runs from it (and
        # the agent's git steps reach the askpass in it): its parents are made traversable
        # here, since bwrap would give them the modes of the host's (/root's 0700).
        for parent in reversed(path.parents[:-1]):
            if parent not in made and not _covered(parent, bound):
                argv += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        argv += ["--ro-bind", str(path), str(path)]
        bound.append(path)
    for path in layout.hidden:
        if _covered(path, bound) and path.is_dir():
            # A read-only mount above covers a hidden path: hide it under an empty tmpfs.
            argv += ["--tmpfs", str(path)]
    # The workspace's own directories, read-write: the files, the home, the agent's state, and
    # the socket's directory, so the daemon's socket appears on the host where the gateway
    # connects to it (a socket made later cannot be bound by itself). With mapped ids the state
    # and socket directories belong to the agent (mode 0700), out of the commands' reach.
    # The parents of the mounts below, made here so that their modes are ours (bwrap would copy
    # the host parent's): the home's parent readable by all, the agent's directory traversable
    # only (its git mirrors are reached by path; its state and socket stay the agent's).
    argv += ["--perms", "0755", "--dir", "/home", "--perms", "0755", "--dir", "/run"]
    argv += ["--perms", "0711", "--dir", "/run/agent"]
    argv += ["--bind", str(layout.workspace), WORKSPACE_ROOT]
    argv += ["--bind", str(layout.home), SANDBOX_HOME]
    argv += ["--bind", str(layout.state), AGENT_STATE_DIR]
    argv += ["--bind", str(layout.socket_dir), AGENT_SOCKET_DIR]
    # Last, so a volume inside the workspace or its home lands on the mount point made for it
    # there; the sandbox sees the volume's directory and nothing else of the data root.
    for host_path, inside in layout.volumes:
        argv += ["--bind", str(host_path), inside]
    argv += ["--chdir", WORKSPACE_ROOT, "--"]
    argv += list(command)
    return argv


def mounted_trees() -> list[Path]:
    """Every host path a sandbox sees read-only (the system, the allowlisted /etc entries and
    the Python environment): a file of the operator's under one of them would be readable by
    every workspace."""
    trees = [Path(p) for p in _SYSTEM_DIRS if os.path.isdir(p) and not os.path.islink(p)]
    trees += [host for host, _ in bubblewrap_etc.host_entries()]
    trees += _minimal_cover(python_environment())
    return trees


def exposed_by(path: Path) -> Path | None:
    """The mounted tree `path` lies under (symlinks resolved), or None."""
    real = Path(os.path.realpath(path))
    for tree in mounted_trees():
        tree = Path(os.path.realpath(tree))
        if real == tree or tree in real.parents:
            return tree
    return None


def python_environment() -> list[Path]:
    """The host paths the agent's Python needs: the interpreter's installation, the virtual
    environment, and the directory the package is imported from (an editable install's
    source)."""
    package_dir = Path(__file__).resolve().parent.parent
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    found = [Path(p) for p in paths] + [package_dir.parent]
    # A symlinked path must exist inside under both names: the one the argv uses, and the one
    # the kernel resolves to.
    found += [p.resolve() for p in found]
    return [p for p in found if p.exists()]


def probe(bwrap: str | None = None) -> Isolation:
    """Whether bwrap can isolate a workspace here: installed, and able to create the namespaces.

    Runs the real argv shape (with a blocked network) once per bwrap binary; the answer is
    cached for the process.
    """
    path = bwrap or shutil.which("bwrap")
    if path is None:
        return Isolation(False, None, "bubblewrap (bwrap) is not installed")
    return _probe_cached(path)


@functools.cache
def _probe_cached(bwrap: str) -> Isolation:
    with tempfile.TemporaryDirectory(prefix="mwc-probe-") as tmp:
        dirs = [Path(tmp, name) for name in ("workspace", "home", "state", "sock")]
        for d in dirs:
            d.mkdir()
        workspace, home, state, sock = dirs
        layout = SandboxLayout(workspace, home, state, sock, block_network=True)
        argv = bwrap_argv(bwrap, layout, ["/bin/sh", "-c", "test -d /workspace"])
        try:
            done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            return Isolation(False, bwrap, f"bwrap could not be run: {err}")
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        return Isolation(False, bwrap, f"bwrap does not work here: {why}")
    return Isolation(True, bwrap, "bubblewrap isolation", shutil.which("pasta"))


def _mirror_system_dir(path: str) -> list[str]:
    if os.path.islink(path):
        return ["--symlink", os.readlink(path), path]
    if os.path.isdir(path):
        return ["--ro-bind", path, path]
    return []


def _minimal_cover(paths: Iterable[Path]) -> list[Path]:
    # Shortest first, then drop any path inside one already chosen: one mount each.
    chosen: list[Path] = []
    for path in sorted({Path(os.path.abspath(p)) for p in paths}, key=lambda p: len(p.parts)):
        if not _covered(path, chosen):
            chosen.append(path)
    return chosen


def _covered(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)
