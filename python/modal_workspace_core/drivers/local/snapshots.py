"""The local driver's snapshots: copies of a workspace's files, home and exec history in the data
root, beside the workspace and never inside it, so nothing a command writes can forge, change or
delete one.

Layout of `<data root>/snapshots/ws-…/sn-…/`: `record.json` (the `SnapshotRecord`), and
`workspace/`, `home/`, `state/` (the agent's exec records and logs). A snapshot is built in a
hidden directory and renamed into place once complete, so a listed snapshot can always be
opened; `cp --reflink=auto` shares the blocks where the file system can (btrfs, XFS), and copies
otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ...errors import ConflictError, NotFoundError, UpstreamError
from ..base import SnapshotRecord, SnapshotSpec, utc_now
from .store import remove_tree, write_json_atomic

__all__ = ["Parts", "SnapshotStore"]

# What a snapshot holds, by the name of its directory in the snapshot.
PARTS = ("workspace", "home", "state")
_RECORD = "record.json"
# How often a running copy reports how far it is.
_PROGRESS_EVERY = 0.5


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


# Called from the copying thread with (bytes copied so far, bytes in all).
CopyProgress = Callable[[int, int], None]


class SnapshotStore:
    """The snapshots of every workspace of one data root."""

    def __init__(self, data_root: Path) -> None:
        self.root = data_root / "snapshots"

    def _dir(self, workspace_id: str) -> Path:
        return self.root / workspace_id

    def take(
        self,
        workspace_id: str,
        spec: SnapshotSpec,
        parts: Parts,
        tags: dict[str, str],
        progress: CopyProgress | None = None,
    ) -> SnapshotRecord:
        """Copies the parts into a new snapshot and returns its record once it is complete."""
        where = self._dir(workspace_id)
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        final = where / spec.snapshot_id
        if final.exists():
            raise ConflictError(f"snapshot {spec.snapshot_id} already exists", field="snapshot_id")
        building = where / f".building-{spec.snapshot_id}-{secrets.token_hex(4)}"
        building.mkdir(mode=0o700)
        try:
            total = sum(_size(path) for _, path in parts.items())
            copied = 0
            for name, path in parts.items():
                done_before = copied
                report = None
                if progress is not None:

                    def report(n: int, base: int = done_before) -> None:
                        progress(base + n, total)

                _copy_tree(path, building / name, report)
                copied += _size(building / name)
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
            with contextlib.suppress(OSError):
                remove_tree(building)
            raise
        if progress is not None:
            progress(copied, total)
        return record

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
        with contextlib.suppress(FileNotFoundError):
            remove_tree(self._dir(workspace_id))

    def restore(self, record: SnapshotRecord, parts: Parts, owner: int | None = None) -> None:
        """Replaces the parts' contents with the snapshot's (the parts' directories stay: one
        may be a mount point). `owner` becomes the owner of the files and home (a fork's own
        uid); the state stays the gateway's."""
        source = self._dir(record.workspace_id) / record.snapshot_id
        if _read_record(source) is None:
            raise ConflictError(
                f"snapshot {record.snapshot_id} cannot be opened: its files are gone",
                field="snapshot_id",
            )
        for name, path in parts.items():
            _empty(path)
            _copy_tree(source / name, path, None)
            if owner is not None and name != "state":
                _chown_tree(path, owner)

    def prune_leftovers(self) -> None:
        """Finishes removals and drops half-built snapshots an earlier process left."""
        with contextlib.suppress(FileNotFoundError):
            for where in self.root.iterdir():
                for entry in where.glob(".*"):
                    with contextlib.suppress(OSError):
                        remove_tree(entry)


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


def _size(path: Path) -> int:
    """Bytes of the regular files under `path` (what a copy writes), not following links."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                total += st.st_size
    return total


def _copy_tree(source: Path, target: Path, report: Callable[[int], None] | None) -> None:
    """`cp -a --reflink=auto source/. target` (owners, modes, times, links and holes kept),
    reporting the bytes copied so far every half second while it runs."""
    target.mkdir(mode=0o700, exist_ok=True)
    if not source.is_dir():
        return
    argv = ["cp", "-a", "--reflink=auto", "--", f"{source}/.", str(target)]
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(_PROGRESS_EVERY):
            if report is not None:
                report(_size(target))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
    finally:
        stop.set()
        watcher.join()
    if done.returncode != 0:
        raise UpstreamError(f"copying the workspace's files failed: {done.stderr.strip()[-400:]}")


def _empty(path: Path) -> None:
    path.mkdir(mode=0o700, exist_ok=True)
    for entry in path.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            remove_tree(entry)
        else:
            entry.unlink()


def _chown_tree(path: Path, owner: int) -> None:
    os.chown(path, owner, owner)
    for dirpath, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            os.chown(os.path.join(dirpath, name), owner, owner, follow_symlinks=False)
