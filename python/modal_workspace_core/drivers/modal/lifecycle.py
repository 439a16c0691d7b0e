"""The Modal driver's snapshots and what is built on them: recording what an ended sandbox left
(its exit snapshot and why it ended), taking, listing and deleting snapshots, resuming a
workspace from one, forking a new workspace from one, suspending, and lifecycle notes. A mixin of
`ModalDriver`, which owns lookups, create, the channel and terminate.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import modal
import modal.exception
from modal_proto import api_pb2

from ...config import ModalSettings
from ...errors import ConflictError, NotFoundError
from ...policy import WORKSPACE_TAGS
from ..base import SnapshotSpec, Suspension, utc_now
from . import records
from .exits import end_reason, entrypoint_stderr, exit_snapshot_image
from .launch import Launch, start_sandbox
from .lookup import Current, checked_workspace_id
from .modal_errors import missing_objects, modal_errors
from .sandbox_options import sandbox_options
from .secret_env import open_secret_env
from .snapshots import delete_image, open_image, take_filesystem_snapshot
from .workspace_records import TAG_VERSION, Change, WorkspaceRecords

if TYPE_CHECKING:
    # The contract's types, in annotations only.
    from ..base import (
        LifecycleNote,
        Lineage,
        Progress,
        SnapshotRecord,
        SuspendReason,
        WorkspaceRecord,
        WorkspaceSpec,
    )

__all__ = ["ModalLifecycle"]

log = logging.getLogger(__name__)

# What a fork does not take over of its parent's recorded resources: secrets are asked for
# anew, the network rule is the spec's, the image is the snapshot's.
_NOT_INHERITED = ("secret_names", "block_network", "image_id", "image_name")
# What a sandbox the gateway has just terminated reads as until Modal says otherwise.
_TERMINATED = api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_TERMINATED)


def _stamp(seconds: float) -> str:
    at = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ModalLifecycle:
    """Snapshots, resume, fork, suspend and notes of `ModalDriver`'s workspaces. What it uses of
    the driver is declared below; the driver defines it."""

    settings: ModalSettings
    _handles: dict[str, modal.Sandbox]
    _made: dict[str, tuple[WorkspaceRecord, float]]

    if TYPE_CHECKING:

        async def _sandbox_app(self) -> modal.App: ...

        def _channel_key(self, workspace_id: str) -> str: ...

        async def _current(self, workspace_id: str, *, tags: bool = True) -> Current: ...

        async def _running(self, workspace_id: str, *, tags: bool = True) -> Current: ...

        def _record(self, current: Current) -> WorkspaceRecord: ...

        async def _drop_client(self, workspace_id: str) -> None: ...

        async def _save(self, current: Current, change: Change) -> dict[str, str]: ...

        def _looked_up(self, current: Current | None, workspace_id: str = "") -> None: ...

        _records: WorkspaceRecords

        # `ModalDriver._new_workspace`: a fork is a create (with the snapshot's `image` and its
        # `lineage`).
        _new_workspace: Callable[..., Awaitable[WorkspaceRecord]]

    # -- what an ended sandbox left -------------------------------------------------------

    async def _observe(self, current: Current) -> Current:
        """Records what an ended sandbox left, once: its exit snapshot (kind `exit`) and the
        suspension saying why it ended. One that the gateway ended itself (suspend, terminate)
        was recorded before it was ended; an exit snapshot still being made is recorded the
        next time the workspace is looked at."""
        tags = current.tags
        done = (records.TAG_ENDED, records.TAG_SUSPENSION, records.TAG_PURGED)
        if current.running or current.result is None or any(t in tags for t in done):
            return current
        if current.info is None and current.sandbox is None:
            return current  # Modal no longer lists it: nothing more can be had of its end
        sandbox = await current.handle()
        reason = end_reason(current.result)
        try:
            image_id, why = await exit_snapshot_image(sandbox)
        except TimeoutError:
            log.info("the exit snapshot of %s is not ready yet", current.workspace_id)
            return current
        snapshot_id = None
        spec = None
        if image_id is not None:
            spec = SnapshotSpec(
                snapshot_id=records.exit_snapshot_id(sandbox.object_id),
                kind="exit",
                label=f"exit: {reason}",
            )
            snapshot_id = spec.snapshot_id
        detail = why
        if reason == "failed_to_start":
            detail = await entrypoint_stderr(sandbox, current.result)
        suspension = Suspension(
            reason=reason, at=self._ended_at(current), snapshot_id=snapshot_id, detail=detail
        )

        def ended(held: dict[str, str]) -> dict[str, str]:
            if any(t in held for t in done):
                return held  # another gateway recorded this end first
            if spec is not None and image_id is not None:
                stored = records.StoredSnapshot.new(current.workspace_id, spec, image_id, held)
                held = records.with_snapshot(held, stored, automatic=True)
            return {**held, records.TAG_SUSPENSION: records.suspension_value(suspension)}

        tags = await self._save(current, ended)
        log.info(
            "workspace %s ended (%s); its exit snapshot is %s",
            current.workspace_id,
            reason,
            snapshot_id or f"missing ({why})",
        )
        return replace(current, tags=tags)

    @staticmethod
    def _ended_at(current: Current) -> str:
        finished = current.info.finished_at if current.info is not None else 0.0
        return _stamp(finished) if finished else utc_now()

    # -- snapshots, resume, fork ------------------------------------------------------------

    async def snapshot(
        self, workspace_id: str, spec: SnapshotSpec, progress: Progress | None = None
    ) -> SnapshotRecord:
        """A filesystem snapshot of the running sandbox, recorded once Modal can open it."""
        workspace_id = checked_workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._running(workspace_id)
            if records.has_snapshot(current.tags, spec.snapshot_id):
                raise ConflictError(
                    "conflict", f"snapshot {spec.snapshot_id} already exists", "snapshot_id"
                )
            # Refused before anything is made: a snapshot beyond the bound would not be kept.
            probe = records.StoredSnapshot.new(workspace_id, spec, "im-probe", current.tags)
            records.with_snapshot(current.tags, probe)
            if progress is not None:
                await progress(0, None)  # Modal reports no progress of its own
            sandbox = await current.handle()
            image_id = await take_filesystem_snapshot(
                sandbox,
                workspace_id,
                spec.snapshot_id,
                ttl_seconds=spec.ttl_seconds,
                timeout=self.settings.snapshot_timeout_seconds,
            )
            await open_image(spec.snapshot_id, image_id)
            made: list[records.StoredSnapshot] = []

            def with_it(held: dict[str, str]) -> dict[str, str]:
                # The tags it keeps are the workspace's as they are now, not when it began.
                made[:] = [records.StoredSnapshot.new(workspace_id, spec, image_id, held)]
                return records.with_snapshot(held, made[0])

            await self._save(current, with_it)
        return made[0].record

    async def list_snapshots(self, workspace_id: str) -> builtins.list[SnapshotRecord]:
        workspace_id = checked_workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._observe(await self._current(workspace_id))
        return [s.record for s in records.snapshots(workspace_id, current.tags)]

    async def _stored(self, current: Current, snapshot_id: str) -> records.StoredSnapshot:
        for stored in records.snapshots(current.workspace_id, current.tags):
            if stored.record.snapshot_id == snapshot_id:
                return stored
        raise NotFoundError(
            "not_found",
            f"snapshot {snapshot_id} of workspace {current.workspace_id} does not exist "
            "(deleted, or never taken)",
            "snapshot_id",
        )

    async def delete_snapshot(self, workspace_id: str, snapshot_id: str) -> None:
        workspace_id = checked_workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._current(workspace_id)
            stored = await self._stored(current, snapshot_id)
            await self._save(current, lambda held: records.without_snapshot(held, snapshot_id))
            await delete_image(stored.image_id)

    async def resume(
        self, workspace_id: str, snapshot: SnapshotRecord, *, only_if_suspended: bool = False
    ) -> WorkspaceRecord:
        """A new sandbox of the same name from the snapshot's image, with the snapshot's tags,
        the workspace's options and every record carried over. The agent's state dir is part of
        the snapshot: its exec history comes back, and the restarted daemon reports what was
        running as lost. The image (and the Secret holding the workspace's `secret_env`) is
        opened before anything is ended, so one that cannot be opened changes nothing."""
        workspace_id = checked_workspace_id(workspace_id)
        try:
            return await self._resume(workspace_id, snapshot, only_if_suspended)
        except BaseException:
            # Whatever it found may have changed (another gateway resumed it first): the
            # operation looks again.
            self._looked_up(None, workspace_id)
            raise

    async def _resume(
        self, workspace_id: str, snapshot: SnapshotRecord, only_if_suspended: bool
    ) -> WorkspaceRecord:
        async with modal_errors(workspace_id):
            current = await self._current(workspace_id)
            if only_if_suspended and current.running:
                raise ConflictError(
                    "conflict", f"workspace {workspace_id} is running already", "workspace_id"
                )
            stored = await self._stored(current, snapshot.snapshot_id)
            image = await open_image(snapshot.snapshot_id, stored.image_id)
            own_secret = records.secret_env(current.tags)
            if own_secret is not None:
                await open_secret_env(workspace_id, own_secret)
            resources = records.resources(current.tags)
            options = sandbox_options(resources, self.settings)
            if current.running:
                await self._drop_client(workspace_id)
                sandbox = await current.handle()
                await sandbox.terminate.aio()
                with contextlib.suppress(modal.exception.Error, TimeoutError):
                    async with asyncio.timeout(60):
                        await sandbox.wait.aio(raise_on_termination=False)
            managed = {k: v for k, v in current.tags.items() if k in WORKSPACE_TAGS}
            kept = {
                k: v
                for k, v in records.internal_tags(current.tags).items()
                if k not in (records.TAG_SUSPENSION, records.TAG_ENDED)
            }
            restored = {
                k: v for k, v in records.caller_tags(snapshot.tags).items() if k not in managed
            }
            tags = {**restored, **managed, **kept, records.TAG_STARTED: utc_now()}
            kept_tags = tags
            # Committed before the new sandbox starts, which carries their copy.
            saved = await self._records.update(workspace_id, lambda _: dict(kept_tags))
            tags = {**saved.tags, TAG_VERSION: str(saved.version)}
            launch = Launch(
                workspace_id=workspace_id,
                options=options,
                image=image,
                tags=tags,
                secret_names=list(resources.get("secret_names") or []),
                # The same Secret as before, by the id its record keeps: values never pass here.
                secret_env=own_secret,
                block_network=bool(resources.get("block_network", False)),
            )
            app = await self._sandbox_app()
            async with missing_objects():
                sandbox = await start_sandbox(
                    app, self.settings, launch, self._channel_key(workspace_id)
                )
        self._handles[workspace_id] = sandbox
        self._looked_up(Current(workspace_id, sandbox, saved.tags, None))
        record = self._record(Current(workspace_id, sandbox, saved.tags, None))
        self._made[workspace_id] = (record, time.monotonic())
        return record

    async def fork(
        self, snapshot: SnapshotRecord, workspace_id: str, spec: WorkspaceSpec, lineage: Lineage
    ) -> WorkspaceRecord:
        """A new workspace from the snapshot's image, its lineage recorded; its exec history
        starts empty (see `launch`)."""
        parent_id = checked_workspace_id(snapshot.workspace_id)
        async with modal_errors(parent_id):
            parent = await self._current(parent_id)
            stored = await self._stored(parent, snapshot.snapshot_id)
            image = await open_image(snapshot.snapshot_id, stored.image_id)
        resources = {k: v for k, v in spec.resources.items() if k not in _NOT_INHERITED}
        spec = spec.model_copy(update={"resources": resources})
        return await self._new_workspace(workspace_id, spec, image=image, lineage=lineage)

    # -- suspend, notes ---------------------------------------------------------------------

    async def suspend(
        self, workspace_id: str, reason: SuspendReason, snapshot_id: str | None
    ) -> WorkspaceRecord:
        """Ends the sandbox (the service has taken the snapshot it names) and records why."""
        workspace_id = checked_workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._running(workspace_id)
            suspension = Suspension(reason=reason, at=utc_now(), snapshot_id=snapshot_id)
            value = records.suspension_value(suspension)
            tags = await self._save(current, lambda held: {**held, records.TAG_SUSPENSION: value})
            sandbox = await current.handle()
            await sandbox.terminate.aio()
        await self._drop_client(workspace_id)
        ended = replace(current, tags=tags, result=_TERMINATED)
        self._looked_up(ended)
        return self._record(ended)

    async def note(self, workspace_id: str, note: LifecycleNote) -> None:
        workspace_id = checked_workspace_id(workspace_id)
        with contextlib.suppress(NotFoundError):
            async with modal_errors(workspace_id):
                current = await self._current(workspace_id)
                await self._save(current, lambda held: records.with_note(held, note))
