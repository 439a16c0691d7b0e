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

# What commands see. The workspace is their root and cwd, as on every driver.
WORKSPACE_ROOT = "/workspace"
# A home of the workspace's own, so nothing of the host user's home (dotfiles, credentials,
# caches) is visible and tools that write to `~` still work and keep their files.
SANDBOX_HOME = "/home/workspace"
# The agent's state (exec logs) and its socket, outside `/workspace` so file operations and
# `git status` do not show them.
AGENT_STATE_DIR = "/run/agent/state"
AGENT_SOCKET_DIR = "/run/agent/sock"
# A PATH that exists inside the sandbox: only system directories are mounted.
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The system's programs and libraries: read-only, and needed by any command at all. On merged
# /usr systems the top-level names are symlinks into /usr and are recreated as symlinks.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# Files and directories under /etc that hold secrets of the host rather than configuration a
# command needs: password hashes, host keys, private TLS keys, sudo rules, Wi-Fi and VPN
# credentials, Kerberos keytabs, systemd credentials. Those that exist are masked.
_ETC_SECRETS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
    "/etc/pki/tls/private",
    "/etc/security/opasswd",
    "/etc/krb5.keytab",
    "/etc/credstore",
    "/etc/credstore.encrypted",
    "/etc/NetworkManager/system-connections",
    "/etc/wpa_supplicant",
    "/etc/wireguard",
    "/etc/letsencrypt",
    "/etc/docker",
    "/etc/containers/auth.json",
)


@dataclass(frozen=True)
class SandboxLayout:
    """The host directories of one workspace and what the sandbox must never show."""

    workspace: Path  # mounted read-write at WORKSPACE_ROOT
    home: Path  # mounted read-write at SANDBOX_HOME
    state: Path  # the agent's state dir, at AGENT_STATE_DIR
    socket_dir: Path  # the directory of the agent's socket, at AGENT_SOCKET_DIR
    block_network: bool = False
    # Host paths that must stay invisible even if a read-only mount would cover them (the data
    # root with every other workspace, the host user's home).
    hidden: tuple[Path, ...] = ()


@dataclass(frozen=True)
class Isolation:
    """Whether workspaces can be isolated here, with what, and why not when they cannot."""

    enabled: bool
    bwrap: str | None
    reason: str


def bwrap_argv(
    bwrap: str,
    layout: SandboxLayout,
    command: Sequence[str],
    *,
    readonly: Iterable[Path] = (),
) -> list[str]:
    """The argv that runs `command` isolated in the workspace of `layout`.

    `readonly` are extra host paths mounted read-only at the same place (the Python
    environment the agent runs from). Environment variables are NOT set here: they reach the
    command through bwrap's own environment, because an argv is readable by every process on the
    host (`/proc/*/cmdline`) and the environment may carry secrets.
    """
    argv = [bwrap]
    # New user, pid, ipc, uts and cgroup namespaces (user and cgroup where possible), and a new
    # network namespace only when the workspace must not reach the network: the pid namespace
    # hides the host's processes (their argv and environment), and stopping its first process
    # ends every process of the workspace.
    argv += ["--unshare-all"]
    if not layout.block_network:
        argv += ["--share-net"]
    # No capabilities, even for a root user: nothing inside may mount, trace or change owners.
    argv += ["--cap-drop", "ALL", "--hostname", "workspace"]
    # Deliberately absent: `--die-with-parent`, because the agent daemon must outlive the
    # server that starts it (a restarted server finds it again); and `--new-session`, because
    # the daemon has no terminal to protect and must stay in the process group the driver
    # signals to stop it.
    for name in _SYSTEM_DIRS:
        argv += _mirror_system_dir(name)
    # Configuration that programs read (users, DNS, certificates, locale, git), read-only and
    # without the host's secrets.
    argv += ["--ro-bind", "/etc", "/etc"]
    argv += _etc_masks()
    argv += _resolver_outside_etc()
    # A private /proc for the new pid namespace, a minimal /dev (null, zero, random, tty, pts,
    # shm) and a private /tmp, so nothing is shared with the host's.
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    bound = [Path(p) for p in (*_SYSTEM_DIRS, "/etc")]
    for path in _minimal_cover(readonly):
        # Never the whole filesystem, nor a hidden path itself: masking it afterwards would
        # leave nothing of the mount.
        if _covered(path, bound) or path == Path("/") or path in layout.hidden:
            continue
        # The Python environment, read-only at its own path, so the agent runs from it.
        argv += ["--ro-bind", str(path), str(path)]
        bound.append(path)
    for path in layout.hidden:
        if _covered(path, bound) and path.is_dir():
            # A read-only mount above covers a hidden path: hide it under an empty tmpfs.
            argv += ["--tmpfs", str(path)]
    # The workspace's own directories, read-write: the files, the home, the agent's state, and
    # the socket's directory, so the daemon's socket appears on the host where the gateway
    # connects to it (a socket made later cannot be bound by itself).
    argv += ["--bind", str(layout.workspace), WORKSPACE_ROOT]
    argv += ["--bind", str(layout.home), SANDBOX_HOME]
    argv += ["--bind", str(layout.state), AGENT_STATE_DIR]
    argv += ["--bind", str(layout.socket_dir), AGENT_SOCKET_DIR]
    argv += ["--chdir", WORKSPACE_ROOT, "--"]
    argv += list(command)
    return argv


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
    return Isolation(True, bwrap, "bubblewrap isolation")


def _mirror_system_dir(path: str) -> list[str]:
    if os.path.islink(path):
        return ["--symlink", os.readlink(path), path]
    if os.path.isdir(path):
        return ["--ro-bind", path, path]
    return []


def _etc_masks() -> list[str]:
    argv: list[str] = []
    paths = list(_ETC_SECRETS)
    ssh = Path("/etc/ssh")
    if ssh.is_dir():
        # Host private keys; the client configuration beside them stays readable.
        paths += [str(p) for p in sorted(ssh.glob("ssh_host_*_key"))]
    for path in paths:
        if os.path.islink(path) or not os.path.exists(path):
            continue
        if os.path.isdir(path):
            argv += ["--tmpfs", path]
        else:
            argv += ["--ro-bind", "/dev/null", path]
    return argv


def _resolver_outside_etc() -> list[str]:
    # On systemd hosts /etc/resolv.conf links into /run, which is not mounted: mount the file it
    # points to at that same place so DNS keeps working.
    argv: list[str] = []
    for name in ("/etc/resolv.conf", "/etc/hosts"):
        if not os.path.islink(name):
            continue
        target = os.path.realpath(name)
        if os.path.isfile(target) and not target.startswith(("/etc/", "/usr/")):
            argv += ["--ro-bind", target, target]
    return argv


def _minimal_cover(paths: Iterable[Path]) -> list[Path]:
    # Shortest first, then drop any path inside one already chosen: one mount each.
    chosen: list[Path] = []
    for path in sorted({Path(os.path.abspath(p)) for p in paths}, key=lambda p: len(p.parts)):
        if not _covered(path, chosen):
            chosen.append(path)
    return chosen


def _covered(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)
