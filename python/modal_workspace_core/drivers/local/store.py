"""The local driver's data root: one directory per workspace, and the lock under which several
server processes (or a restarted one) change a workspace's record and start its daemon.

Layout of `<data root>/ws-…/`: `workspace/` (the files, `/workspace` to commands), `home/` (the
commands' `$HOME`), `state/` (the agent's exec logs), `run/agent.sock` (the agent's socket),
`agent.pid`, `agent.log`, `channel.key` (what the gateway proves itself to the agent with),
`etc/` (the sandbox's generated /etc files), `.lock`. The workspace's record is not here: it is
in the data root's shared store (`workspace_records.py`), beside the directories.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import _core
from ...errors import UpstreamError


class WorkspaceGone(LookupError):
    """The workspace's directory does not exist (any more)."""


@dataclass(frozen=True)
class WorkspaceDir:
    """The paths of one workspace's directory."""

    path: Path

    @property
    def workspace(self) -> Path:
        return self.path / "workspace"

    @property
    def home(self) -> Path:
        return self.path / "home"

    @property
    def state(self) -> Path:
        return self.path / "state"

    @property
    def run(self) -> Path:
        return self.path / "run"

    @property
    def socket(self) -> Path:
        return self.run / "agent.sock"

    @property
    def pid_file(self) -> Path:
        return self.path / "agent.pid"

    @property
    def log(self) -> Path:
        return self.path / "agent.log"

    @property
    def key_file(self) -> Path:
        return self.path / "channel.key"

    def new_channel_key(self) -> str:
        """A fresh channel key for the daemon about to start, kept where only the gateway
        reads it (the data root is never mounted into a sandbox)."""
        key = secrets.token_hex(32)
        tmp = self.key_file.with_name(f".channel.key.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key)
        tmp.replace(self.key_file)
        return key

    def channel_key(self) -> str | None:
        """The running daemon's channel key (None before its first start)."""
        try:
            return self.key_file.read_text().strip() or None
        except FileNotFoundError:
            return None

    def make(self) -> None:
        """Create the directory (raising FileExistsError if it exists) and its parts."""
        self.path.mkdir(mode=0o700)
        for part in (self.workspace, self.home, self.state, self.run):
            part.mkdir(mode=0o700)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the workspace's lock (blocking): one writer of its record and daemon at a time,
        across processes. Not reentrant: a second hold in the same process waits for ever."""
        try:
            fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            raise WorkspaceGone(self.path.name) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def remove(self) -> None:
        """Remove the directory: renamed aside first, so it leaves listings at once even if
        removing a large tree takes long or is interrupted."""
        trash = self.path.with_name(f".trash-{self.path.name}-{secrets.token_hex(4)}")
        self.path.rename(trash)
        remove_tree(trash)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Replace `path` with `data` as JSON: readers see the old or the new file, never a part,
    and a crash leaves one of the two."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with tmp.open("w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_tree(path: Path) -> None:
    """`rm -rf` of a tree a workspace may have shaped (or still be reshaping): the core's
    removal through directory fds, which removes a symlink as a link, never what it points at,
    and opens up directories a command made read-only (git objects, caches). Its messages name
    no host path."""
    try:
        _core.remove_tree(str(path), display="the workspace's files")
    except _core.TreeError as err:
        raise UpstreamError(f"removing the workspace's files failed: {err}") from None


def remove_leftovers(data_root: Path) -> None:
    """Finish removals an earlier process was interrupted in."""
    for trash in data_root.glob(".trash-ws-*"):
        with contextlib.suppress(OSError, UpstreamError):
            remove_tree(trash)
