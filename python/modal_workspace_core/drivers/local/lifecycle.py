"""The local driver's snapshots and what is built on them: taking, listing and deleting a
workspace's snapshots, resuming it from one, forking a new workspace from one, suspending it, and
the lifecycle notes kept beside its record. A mixin of `LocalDriver`, which owns the rest.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...errors import ConflictError, NotFoundError, UpstreamError
from ..base import MAX_LIFECYCLE_NOTES, Suspension, utc_now
from . import daemon, uids
from .disk import DiskError, WorkspaceDisk
from .record import as_record, check_live, process_marker
from .snapshots import Parts, SnapshotStore
from .store import WorkspaceDir

if TYPE_CHECKING:
    # The contract's types, in annotations only.
    from ..base import (
        LifecycleNote,
        Lineage,
        Progress,
        SnapshotRecord,
        SnapshotSpec,
        SuspendReason,
        WorkspaceRecord,
        WorkspaceSpec,
    )

__all__ = ["LocalLifecycle"]


class LocalLifecycle:
    """Snapshots, resume, fork, suspend and notes of `LocalDriver`'s workspaces. What it uses of
    the driver is declared below; the driver defines it."""

    snapshots: SnapshotStore
    _socket_paths: daemon.SocketPaths
    # The disk bound a workspace without a disk of its own is measured against.
    default_disk_mb: int

    if TYPE_CHECKING:

        def _dir(self, workspace_id: str) -> WorkspaceDir: ...

        def _meta(self, ws: WorkspaceDir) -> dict[str, Any]: ...

        def _held(self, ws: WorkspaceDir) -> contextlib.AbstractContextManager[dict[str, Any]]: ...

        def _write(self, ws: WorkspaceDir, meta: dict[str, Any]) -> None: ...

        def _start_daemon(self, ws: WorkspaceDir, meta: dict[str, Any]) -> None: ...

        # `LocalDriver._create`: a fork is a create (with `env`, `lineage` and a `fill` that
        # restores the snapshot before the agent starts).
        _create: Callable[..., Awaitable[WorkspaceRecord]]

    async def snapshot(
        self, workspace_id: str, spec: SnapshotSpec, progress: Progress | None = None
    ) -> SnapshotRecord:
        ws = self._dir(workspace_id)
        loop = asyncio.get_running_loop()

        def report(done: int, total: int) -> None:
            # From the copying thread: the reporter runs on the loop, and a slow one is skipped.
            if progress is not None:
                asyncio.run_coroutine_threadsafe(progress(done, total), loop)

        return await asyncio.to_thread(self._snapshot_sync, ws, spec, report)

    def _snapshot_sync(
        self, ws: WorkspaceDir, spec: SnapshotSpec, report: Callable[[int, int], None]
    ) -> SnapshotRecord:
        meta = self._meta(ws)
        check_live(meta)
        parts = self._parts(ws, meta, with_state=True)
        # Its snapshots' budget follows its disk: its own, else the bound it would have had.
        disk_mb = int(meta.get("local", {}).get("disk_mb") or self.default_disk_mb)
        return self.snapshots.take(
            meta["workspace_id"], spec, parts, meta.get("tags", {}), report, disk_mb=disk_mb
        )

    async def list_snapshots(self, workspace_id: str) -> builtins.list[SnapshotRecord]:
        ws = self._dir(workspace_id)
        await asyncio.to_thread(self._meta, ws)
        return await asyncio.to_thread(self.snapshots.list, workspace_id)

    async def delete_snapshot(self, workspace_id: str, snapshot_id: str) -> None:
        ws = self._dir(workspace_id)
        await asyncio.to_thread(self._meta, ws)
        await asyncio.to_thread(self.snapshots.delete, workspace_id, snapshot_id)

    async def resume(
        self, workspace_id: str, snapshot: SnapshotRecord, *, only_if_suspended: bool = False
    ) -> WorkspaceRecord:
        ws = self._dir(workspace_id)
        return await asyncio.to_thread(self._resume_sync, ws, snapshot, only_if_suspended)

    def _resume_sync(
        self, ws: WorkspaceDir, snapshot: SnapshotRecord, only_if_suspended: bool
    ) -> WorkspaceRecord:
        with self._held(ws) as meta:
            workspace_id = meta["workspace_id"]
            if only_if_suspended and not meta.get("suspension"):
                raise ConflictError(
                    "conflict", f"workspace {workspace_id} is running already", "workspace_id"
                )
            # Whatever still runs goes first: its commands are reported lost by the new agent.
            daemon.stop(ws.pid_file, process_marker(workspace_id))
            suspension = meta.get("suspension") or {}
            untouched = suspension.get("files_kept") and (
                suspension.get("snapshot_id") == snapshot.snapshot_id
            )
            if not untouched:
                self._rebuild(ws, meta)
                self.snapshots.restore(snapshot, self._parts(ws, meta, with_state=True))
            meta["tags"] = dict(snapshot.tags)
            meta.pop("suspension", None)
            meta.pop("terminated_at", None)
            meta["started_at"] = utc_now()
            self._write(ws, meta)
            self._start_daemon(ws, meta)
        return as_record(meta, "running")

    async def fork(
        self, snapshot: SnapshotRecord, workspace_id: str, spec: WorkspaceSpec, lineage: Lineage
    ) -> WorkspaceRecord:
        parent = await asyncio.to_thread(self._meta, self._dir(snapshot.workspace_id))
        # The parent's own environment goes with its files; its secrets do not.
        env = dict(parent.get("local", {}).get("env") or {})

        def fill(ws: WorkspaceDir, meta: dict[str, Any]) -> None:
            slot = meta.get("local", {}).get("uid_slot")
            owner = uids.host_ids(slot).commands if isinstance(slot, int) else None
            self.snapshots.restore(snapshot, self._parts(ws, meta, with_state=False), owner)

        return await self._create(workspace_id, spec, env=env, lineage=lineage, fill=fill)

    async def suspend(
        self, workspace_id: str, reason: SuspendReason, snapshot_id: str | None
    ) -> WorkspaceRecord:
        ws = self._dir(workspace_id)
        return await asyncio.to_thread(self._suspend_sync, ws, reason, snapshot_id)

    def _suspend_sync(
        self, ws: WorkspaceDir, reason: SuspendReason, snapshot_id: str | None
    ) -> WorkspaceRecord:
        with self._held(ws) as meta:
            check_live(meta)
            daemon.stop(ws.pid_file, process_marker(meta["workspace_id"]))
            suspension = Suspension(reason=reason, at=utc_now(), snapshot_id=snapshot_id)
            # The files stay where they are (nothing runs to change them): resuming from this
            # suspension's snapshot only restarts the agent.
            meta["suspension"] = {**suspension.model_dump(), "files_kept": True}
            self._write(ws, meta)
        self._socket_paths.forget(ws.socket)
        return as_record(meta, "suspended")

    async def note(self, workspace_id: str, note: LifecycleNote) -> None:
        ws = self._dir(workspace_id)
        with contextlib.suppress(NotFoundError):
            await asyncio.to_thread(self._note_sync, ws, note)

    def _note_sync(self, ws: WorkspaceDir, note: LifecycleNote) -> None:
        with self._held(ws) as meta:
            notes = [*meta.get("lifecycle", []), note.model_dump()]
            meta["lifecycle"] = notes[-MAX_LIFECYCLE_NOTES:]
            self._write(ws, meta)

    def _parts(self, ws: WorkspaceDir, meta: dict[str, Any], *, with_state: bool) -> Parts:
        """Where the workspace's files, home and exec history are on the host now."""
        state = ws.state if with_state else None
        if meta.get("local", {}).get("disk_mb"):
            own = WorkspaceDisk(ws.path)
            try:
                own.mount()
            except DiskError as err:
                raise UpstreamError(f"cannot mount the workspace's disk: {err}") from err
            return Parts(own.workspace, own.home, state)
        return Parts(ws.workspace, ws.home, state)

    def _rebuild(self, ws: WorkspaceDir, meta: dict[str, Any]) -> None:
        """Lays out again what a kept-but-terminated workspace lost: its directories, its own
        disk, their owner."""
        for part in (ws.workspace, ws.home, ws.state, ws.run):
            part.mkdir(mode=0o700, exist_ok=True)
        local = meta.get("local", {})
        slot = local.get("uid_slot")
        if not isinstance(slot, int):
            return
        owner = uids.host_ids(slot).commands
        for part in (ws.workspace, ws.home):
            os.chown(part, owner, owner)
        size = local.get("disk_mb")
        own = WorkspaceDisk(ws.path)
        if size and not own.image.exists():
            try:
                own.create(int(size), owner)
            except DiskError as err:
                raise UpstreamError("upstream", f"cannot give the workspace a disk: {err}") from err
