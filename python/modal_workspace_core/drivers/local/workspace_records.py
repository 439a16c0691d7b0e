"""Where a local workspace's record is kept: the data root's shared store (`SqliteStore`, the one
the OAuth state and the sweep's claims use), at `workspaces/<id>/record`, as JSON.

The store's file lies in the data root, which no sandbox mounts, so nothing a workspace's
commands write can become its record. The store makes each read and write atomic; a caller
that reads, changes and writes a record back holds the workspace's lock around the three
(`WorkspaceDir.locked`), which makes them one step across gateway processes.

An earlier version kept the record as `meta.json` in the workspace's directory: `adopt_meta_file`
moves such a file into the store, once, and removes it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
from typing import Any

from ...policy import id_pattern
from ...shared_store import SqliteStore
from .store import WorkspaceDir, WorkspaceGone

__all__ = ["FOLDER", "WorkspaceRecords"]

FOLDER = "workspaces"
# The record's file in a workspace's directory before the store held it.
_META_FILE = "meta.json"
# Far above any record (its tags and notes are bounded): a larger file is not one.
_MAX_META_BYTES = 4 << 20
_WORKSPACE_ID = re.compile(id_pattern("ws"))
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

log = logging.getLogger(__name__)


class WorkspaceRecords:
    """The records of the local driver's workspaces. Every call blocks (a worker thread's)."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store

    def read_now(self, workspace_id: str) -> dict[str, Any] | None:
        """The workspace's record, or None where the store has none."""
        raw = self.store.read_now(_record_key(workspace_id))
        if raw is None:
            return None
        data = json.loads(raw)
        return data if isinstance(data, dict) else None

    def write_now(self, workspace_id: str, record: dict[str, Any]) -> None:
        """Puts the workspace's record, replacing the one there."""
        value = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
        self.store.write_now(_record_key(workspace_id), value)

    def remove_now(self, workspace_id: str) -> None:
        """Removes everything the store holds for the workspace; nothing there is fine."""
        self.store.remove_now(f"{FOLDER}/{_checked(workspace_id)}")

    def recorded_now(self) -> list[str]:
        """The ids of the workspaces the store has records of."""
        return [name for name in self.store.names_now(FOLDER) if is_workspace_id(name)]

    def adopt_meta_file(self, ws: WorkspaceDir) -> bool:
        """Moves the record an earlier version left in the workspace's directory into the store
        (unless the store has one already) and removes the file; True when it was moved. Takes
        the workspace's lock: the caller must not hold it."""
        workspace_id = _checked(ws.path.name)
        meta_file = ws.path / _META_FILE
        if not os.path.lexists(meta_file):
            return False
        moved = False
        try:
            with ws.locked():
                if self.read_now(workspace_id) is None:
                    record = _read_meta_file(ws)
                    if record is None or record.get("workspace_id") != workspace_id:
                        log.warning(
                            "%s: its %s is not a record of it; left as it is",
                            workspace_id,
                            _META_FILE,
                        )
                        return False
                    self.write_now(workspace_id, record)
                    moved = True
                with contextlib.suppress(FileNotFoundError):
                    meta_file.unlink()
                return moved
        except WorkspaceGone:
            return False  # removed meanwhile


def is_workspace_id(name: str) -> bool:
    """Whether `name` (a directory's, a folder's) is a well-formed workspace id."""
    return _WORKSPACE_ID.fullmatch(name) is not None


def _checked(workspace_id: str) -> str:
    # Keys are built from well-formed ids alone (the driver checked the caller's already).
    if not is_workspace_id(workspace_id):
        raise ValueError(f"not a workspace id: {workspace_id[:80]!r}")
    return workspace_id


def _record_key(workspace_id: str) -> str:
    return f"{FOLDER}/{_checked(workspace_id)}/record"


def _read_meta_file(ws: WorkspaceDir) -> dict[str, Any] | None:
    """The old record file's content, read as the gateway's own file: a regular file, never
    through a link nor waiting on a FIFO, and bounded."""
    try:
        fd = os.open(ws.path / _META_FILE, _READ_FLAGS)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_META_BYTES:
            return None
        try:
            data = json.loads(f.read(_MAX_META_BYTES + 1))
        except ValueError:
            return None
    return data if isinstance(data, dict) else None
