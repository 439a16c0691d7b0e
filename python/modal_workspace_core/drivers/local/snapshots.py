"""The local driver's snapshots: copies of a workspace's files, home and exec history in the data
root, beside the workspace and never inside it, so nothing a command writes can forge, change or
delete one.

Layout of `<data root>/snapshots/ws-…/sn-…/`: `record.json` (the `SnapshotRecord`), and
`workspace/`, `home/`, `state/` (the agent's exec records and logs). A snapshot is built in a
hidden directory and renamed into place once complete, so a listed snapshot can always be
opened.

A command may reshape its tree while it is copied (a directory swapped for a symlink to a host
directory, a FIFO, a file that keeps growing), so every copy, restore and removal here is the
core's (`_core.copy_tree`, `remove_tree`, `empty_dir`): directory fds opened one name at a time
with `O_NOFOLLOW`, never a path string rebuilt from a root and handed to a tool running as root.
Snapshots are bounded in bytes (`SnapshotBudget`) before any copy and while it runs, and a copy
stops when the host's free space falls under a floor.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ... import _core
from ...config import (
    DEFAULT_SNAPSHOT_FREE_FLOOR_MB,
    SNAPSHOT_BUDGET_ENV,
    SNAPSHOT_FREE_FLOOR_ENV,
    SNAPSHOTS_BUDGET_ENV,
)
from ...errors import ConflictError, LimitError, NotFoundError, UpstreamError
from ..base import SnapshotRecord, SnapshotSpec, utc_now
from .store import remove_tree, write_json_atomic

__all__ = ["Parts", "SnapshotBudget", "SnapshotStore"]

# What a snapshot holds, by the name of its directory in the snapshot, and how messages name
# each part (the workspace's own paths, never the host's).
PARTS = ("workspace", "home", "state")
DISPLAY = {"workspace": "/workspace", "home": "the home directory", "state": "the exec history"}
_RECORD = "record.json"
# How often a running copy reports how far it is.
_PROGRESS_EVERY = 0.5
# The most entries one part may hold (a copy's walk and a measure stop there).
MAX_ENTRIES = 5_000_000
_UNBOUNDED = 1 << 62


@dataclass(frozen=True)
class Parts:
    """Where a workspace's parts live on the host now (its own disk, or its directory)."""

    workspace: Path
    home: Path
    state: Path | None  # None: not this one (a fork starts with no exec history)

    def items(self) -> Iterator[tuple[str, Path]]:
        for name, path in zip(PARTS, (self.workspace, self.home, self.state), strict=True):
            if path is not None:
                yield name, path


@dataclass(frozen=True)
class SnapshotBudget:
    """How many bytes snapshots may hold on the host.

    `per_workspace_mb`: one workspace's snapshots together (None: `DISK_FACTOR` times its disk
    bound); `root_mb`: every snapshot of the data root together (None: half of the file system
    that holds it); `free_floor_mb`: a copy stops when its file system has less free."""

    per_workspace_mb: int | None = None
    root_mb: int | None = None
    free_floor_mb: int = DEFAULT_SNAPSHOT_FREE_FLOOR_MB

    DISK_FACTOR = 2

    def for_workspace(self, disk_mb: int) -> int:
        if self.per_workspace_mb is not None:
            return self.per_workspace_mb << 20
        return (self.DISK_FACTOR * disk_mb) << 20

    def for_root(self, root: Path) -> int:
        if self.root_mb is not None:
            return self.root_mb << 20
        st = os.statvfs(root)
        return st.f_blocks * st.f_frsize // 2


# Called from the copying thread with (bytes copied so far, bytes in all).
CopyProgress = Callable[[int, int], None]


class SnapshotStore:
    """The snapshots of every workspace of one data root."""

    def __init__(self, data_root: Path, budget: SnapshotBudget | None = None) -> None:
        self.root = data_root / "snapshots"
        self.budget = budget or SnapshotBudget()
        # Bytes that copies now running may still write: counted against the data root's
        # budget until their snapshot is listed (or fails).
        self._reserved = 0
        self._reserving = threading.Lock()

    def _dir(self, workspace_id: str) -> Path:
        return self.root / workspace_id

    def take(
        self,
        workspace_id: str,
        spec: SnapshotSpec,
        parts: Parts,
        tags: dict[str, str],
        progress: CopyProgress | None = None,
        *,
        disk_mb: int,
    ) -> SnapshotRecord:
        """Copies the parts into a new snapshot and returns its record once it is complete.
        Refused (`limit`) before any copy when the workspace's or the data root's snapshot
        budget, or the host's free space, could not hold it."""
        where = self._dir(workspace_id)
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        final = where / spec.snapshot_id
        if final.exists():
            raise ConflictError(f"snapshot {spec.snapshot_id} already exists", field="snapshot_id")
        total = sum(_measure(name, path) for name, path in parts.items())
        allowed = self._reserve(workspace_id, total, disk_mb)
        building = where / f".building-{spec.snapshot_id}-{secrets.token_hex(4)}"
        try:
            building.mkdir(mode=0o700)
            copied = 0
            for name, path in parts.items():
                (building / name).mkdir(mode=0o700)

                def report(n: int, before: int = copied) -> None:
                    if progress is not None:
                        progress(before + n, max(total, before + n))

                copied += self._copy(
                    name,
                    path,
                    building / name,
                    max_bytes=allowed - copied,
                    min_free_bytes=self.budget.free_floor_mb << 20,
                    report=report,
                )
            expires = spec.expires_at(datetime.now(UTC))
            record = SnapshotRecord(
                snapshot_id=spec.snapshot_id,
                workspace_id=workspace_id,
                kind=spec.kind,
                label=spec.label,
                created_at=utc_now(),
                expires_at=expires,
                size_bytes=copied,
                repos=dict(spec.repos),
                tags=dict(tags),
            )
            write_json_atomic(building / _RECORD, record.model_dump())
            building.rename(final)
        except BaseException:
            with contextlib.suppress(OSError, UpstreamError):
                remove_tree(building)
            raise
        finally:
            with self._reserving:
                self._reserved -= allowed
        if progress is not None:
            progress(copied, total)
        return record

    def _reserve(self, workspace_id: str, total: int, disk_mb: int) -> int:
        """Checks the budgets for a snapshot of `total` bytes and reserves what the copy may
        write (it may grow while copied, up to what the budgets leave); returns that."""
        mib = 1 << 20
        own_budget = self.budget.for_workspace(disk_mb)
        own = sum(r.size_bytes or 0 for r in self.list(workspace_id))
        if own + total > own_budget:
            raise LimitError(
                f"a snapshot of {workspace_id} would hold {_mib(total)} MiB, and its snapshots "
                f"{_mib(own)} MiB already: over its snapshot budget of {own_budget // mib} MiB "
                f"({SNAPSHOT_BUDGET_ENV}; by default {SnapshotBudget.DISK_FACTOR} times its disk). "
                "Delete snapshots it no longer needs (workspace_snapshot_delete) or remove files "
                "first",
                field="workspace_id",
            )
        with self._reserving:
            root_budget = self.budget.for_root(self.root.parent)
            everyone = self._all_sizes() + self._reserved
            if everyone + total > root_budget:
                raise LimitError(
                    f"a snapshot of {workspace_id} would hold {_mib(total)} MiB, and this "
                    f"server's snapshots {_mib(everyone)} MiB already: over the budget of "
                    f"{root_budget // mib} MiB for all snapshots ({SNAPSHOTS_BUDGET_ENV}). Delete "
                    "snapshots first",
                    field="workspace_id",
                )
            floor = self.budget.free_floor_mb * mib
            free = _free_bytes(self.root)
            if free - total < floor:
                raise LimitError(
                    f"a snapshot of {workspace_id} would hold {_mib(total)} MiB, and the server "
                    f"has {_mib(free)} MiB free: it keeps {floor // mib} MiB free "
                    f"({SNAPSHOT_FREE_FLOOR_ENV}). Delete snapshots or workspaces first",
                    field="workspace_id",
                )
            allowed = max(total, min(own_budget - own, root_budget - everyone))
            self._reserved += allowed
        return allowed

    def _copy(
        self,
        name: str,
        source: Path,
        target: Path,
        *,
        max_bytes: int,
        min_free_bytes: int,
        owner: int | None = None,
        report: Callable[[int], None] | None = None,
    ) -> int:
        """One part, with the core's contained copy; returns the bytes it copied, and calls
        `report` with the bytes copied so far every half second while it runs."""
        if not source.is_dir():
            return 0
        counter = _core.TreeProgress()
        stop = threading.Event()

        def watch() -> None:
            while not stop.wait(_PROGRESS_EVERY):
                if report is not None:
                    report(counter.bytes)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            stats = _core.copy_tree(
                str(source),
                str(target),
                display=DISPLAY[name],
                max_bytes=max(0, max_bytes),
                max_entries=MAX_ENTRIES,
                min_free_bytes=min_free_bytes,
                owner=owner,
                progress=counter,
            )
        except _core.TreeError as err:
            raise _copy_error(err) from None
        finally:
            stop.set()
            watcher.join()
        return int(stats["bytes"])

    def _all_sizes(self) -> int:
        total = 0
        with contextlib.suppress(FileNotFoundError):
            for where in self.root.iterdir():
                if where.name.startswith("ws-"):
                    total += sum(r.size_bytes or 0 for r in self.list(where.name))
        return total

    def list(self, workspace_id: str) -> list[SnapshotRecord]:
        """Every complete snapshot of the workspace, oldest first."""
        where = self._dir(workspace_id)
        records = []
        with contextlib.suppress(FileNotFoundError):
            for entry in where.iterdir():
                if entry.name.startswith("sn-"):
                    record = _read_record(entry)
                    if record is not None:
                        records.append(record)
        return sorted(records, key=lambda r: (r.created_at, r.snapshot_id))

    def get(self, workspace_id: str, snapshot_id: str) -> SnapshotRecord:
        record = _read_record(self._dir(workspace_id) / snapshot_id)
        if record is None:
            raise _missing(workspace_id, snapshot_id)
        return record

    def delete(self, workspace_id: str, snapshot_id: str) -> None:
        path = self._dir(workspace_id) / snapshot_id
        if _read_record(path) is None:
            raise _missing(workspace_id, snapshot_id)
        trash = path.with_name(f".deleting-{snapshot_id}-{secrets.token_hex(4)}")
        path.rename(trash)  # out of listings at once, however long the removal takes
        remove_tree(trash)

    def delete_all(self, workspace_id: str) -> None:
        remove_tree(self._dir(workspace_id))

    def restore(self, record: SnapshotRecord, parts: Parts, owner: int | None = None) -> None:
        """Replaces the parts' contents with the snapshot's (the parts' directories stay: one
        may be a mount point). `owner` becomes the owner of the files and home (a fork's own
        uid); the state stays the gateway's. The workspace's directories are emptied and
        filled through directory fds, so a link left in them is removed as a link and never
        written through."""
        source = self._dir(record.workspace_id) / record.snapshot_id
        if _read_record(source) is None:
            raise ConflictError(
                f"snapshot {record.snapshot_id} cannot be opened: its files are gone",
                field="snapshot_id",
            )
        floor = self.budget.free_floor_mb << 20
        if _free_bytes(self.root) - (record.size_bytes or 0) < floor:
            raise LimitError(
                f"restoring snapshot {record.snapshot_id} would leave the server less than "
                f"{floor >> 20} MiB free ({SNAPSHOT_FREE_FLOOR_ENV}): delete snapshots or "
                "workspaces first",
                field="snapshot_id",
            )
        for name, path in parts.items():
            path.mkdir(mode=0o700, exist_ok=True)
            try:
                _core.empty_dir(str(path), display=DISPLAY[name])
            except _core.TreeError as err:
                raise _copy_error(err) from None
            # The snapshot cannot grow (no workspace reaches it), and the target is bounded by
            # the workspace's own disk where it has one: the floor was checked above.
            self._copy(
                name,
                source / name,
                path,
                max_bytes=_UNBOUNDED,
                min_free_bytes=0,
                owner=owner if name != "state" else None,
            )

    def prune_leftovers(self) -> None:
        """Finishes removals and drops half-built snapshots an earlier process left."""
        with contextlib.suppress(FileNotFoundError):
            for where in self.root.iterdir():
                for entry in where.glob(".*"):
                    with contextlib.suppress(OSError, UpstreamError):
                        remove_tree(entry)


def _mib(n: int) -> int:
    return (n + (1 << 20) - 1) >> 20


def _free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _measure(name: str, path: Path) -> int:
    if not path.is_dir():
        return 0
    try:
        usage = _core.tree_usage(str(path), display=DISPLAY[name], max_entries=MAX_ENTRIES)
    except _core.TreeError as err:
        raise _copy_error(err) from None
    if usage["truncated"]:
        raise LimitError(
            f"{DISPLAY[name]} holds more than {MAX_ENTRIES} entries to snapshot: remove files "
            "first",
            field="workspace_id",
        )
    if usage["too_deep"]:
        raise LimitError(
            f"{usage['too_deep']} is nested more than 256 directories deep, past what a snapshot "
            "copies: move it up or remove it first",
            field="workspace_id",
        )
    return int(usage["bytes"])


def _copy_error(err: _core.TreeError) -> Exception:
    """The core's refusal in the error model; its message names workspace paths only."""
    message = str(err)
    if err.kind in ("limit", "no_space"):
        return LimitError(f"{message}; nothing was kept", field="workspace_id")
    return UpstreamError(f"copying the workspace's files failed: {message}")


def _missing(workspace_id: str, snapshot_id: str) -> NotFoundError:
    return NotFoundError(
        f"snapshot {snapshot_id} of workspace {workspace_id} does not exist (deleted, or never "
        "taken)",
        field="snapshot_id",
    )


def _read_record(path: Path) -> SnapshotRecord | None:
    try:
        data = json.loads((path / _RECORD).read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None
    return SnapshotRecord.model_validate(data)
