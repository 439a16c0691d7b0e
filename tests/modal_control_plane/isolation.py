"""Real container paths for sandbox processes, with bubblewrap when it works here.

Each process of a sandbox runs in its own mount namespace that shows the host's directories
read-only, a private `/tmp` and `/run`, and the sandbox's own directories read-write at their
container paths (`/workspace`, `/run/mwc`, …), so paths that travel inside data (the agent's
protocol, shell scripts) mean the same as on Modal. All processes of a sandbox see the same
directories, so the agent's unix socket is reachable from every exec.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

# Where a sandbox's processes find their home: a private directory, like a container's.
HOME = "/run/home"
# Top-level host directories not shown inside (replaced by private ones, or by the kernel's).
# The host's /root is one: a container's is its own, and this machine's interpreter may live
# under a 0700 /root that the sandbox's unprivileged users (its commands, the agent's git) must
# still run (`_python_under_private_dirs` shows it inside, under a traversable /root).
_PRIVATE = {"proc", "dev", "sys", "tmp", "run", "root"}


def bwrap_argv(bwrap: str, binds: Mapping[str, Path], cwd: str, argv: Sequence[str]) -> list[str]:
    """`argv` run by bwrap with `binds` (container path -> host directory) read-write."""
    out = [bwrap, "--die-with-parent"]
    tops = {p.strip("/").split("/")[0] for p in binds}
    for name in sorted(os.listdir("/")):
        path = f"/{name}"
        if name in _PRIVATE or name in tops:
            continue
        if os.path.islink(path):
            out += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            out += ["--ro-bind", path, path]
    # /tmp as a container has it: every user may write there (sticky).
    out += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
    out += ["--tmpfs", "/run"]
    out += ["--tmpfs", "/root"]
    for path in _python_under_private_dirs():
        # bwrap would make the directories above a bind point 0700: every user of the
        # sandbox must pass them.
        parents = list(reversed(Path(path).parents))[2:]
        for parent in parents:
            out += ["--perms", "0755", "--dir", str(parent)]
        out += ["--ro-bind", path, path]
    for container, host in sorted(binds.items()):
        out += ["--bind", str(host), container]
    out += ["--chdir", cwd, "--", *argv]
    return out


@functools.cache
def _python_under_private_dirs() -> list[str]:
    """The Python environment and this package's checkout, when they live under a directory the
    sandbox gets privately (a checkout under /tmp, say): sandbox processes run this interpreter,
    the agent and test scripts from them, so they must still see them, read-only."""
    import modal_workspace_core

    package_source = Path(modal_workspace_core.__file__).resolve().parent.parent
    # From a checkout, the whole repository: tests start sandboxes with scripts from tests/.
    checkout = package_source.parent
    shown = checkout if (checkout / "Cargo.toml").exists() else package_source
    paths = {sys.prefix, sys.base_prefix, str(shown)}
    return sorted(p for p in paths if p.strip("/").split("/")[0] in _PRIVATE)


@functools.cache
def usable_bwrap() -> str | None:
    """The bwrap binary, if it can build the namespace above on this machine; None otherwise."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    with tempfile.TemporaryDirectory(prefix="mcp-probe-") as tmp:
        binds = {"/workspace": Path(tmp), "/run/mwc": Path(tmp)}
        argv = bwrap_argv(bwrap, binds, "/workspace", ["/bin/sh", "-c", "test -d /run/mwc"])
        try:
            done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
    return bwrap if done.returncode == 0 else None
