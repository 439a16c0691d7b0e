"""Snapshots, resume and fork: a workspace's files outlive its sandbox.

A snapshot is taken by the driver (a copy in the data root, a Modal filesystem image) and kept
beside the workspace, never inside it. Resuming brings the same workspace id back from one;
forking makes a new workspace from one, with its lineage. An expired or deleted snapshot is an
error naming it, never a silent fresh workspace.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from .. import policy
from ..drivers.base import (
    Lineage,
    SnapshotKind,
    SnapshotRecord,
    WorkspaceRecord,
    WorkspaceSpec,
    utc_now,
)
from ..errors import ConflictError, UpstreamError, WorkspaceError
from ..runtime.call import ANSWER_BY
from ..runtime.progress import reported_while
from .lifecycle import (
    SnapshotPlan,
    make_snapshot,
    note_resume,
    plan_snapshot,
    resume_workspace,
    take_snapshot,
    usable_snapshot,
)
from .machinery.fields import IdempotencyKey, Input, Label, Output, SnapshotId, WorkspaceId
from .machinery.limits import Bound, Bounds
from .machinery.table import DESTROY, READ, WRITE, WS, Declarations
from .task_stream import TaskStream, wait_budget
from .workspace_info import Workspace, once_per_key, workspace_out

if TYPE_CHECKING:
    from ..runtime.service import Service

declare = Declarations()

SN = WS + "/snapshots"
# The longest a snapshot may be kept when a caller gives a TTL (none: until deleted).
MAX_TTL_SECONDS = 366 * 24 * 3600
# The longest a call waits for its snapshot (the Modal driver's own deadline is 900 s): each
# surface waits less (`_SNAPSHOT_BOUNDS`), and a snapshot that takes longer goes on after the
# answer, its progress and result on its task stream.
MAX_SNAPSHOT_WAIT = 900.0
# How long the gateway tries to end a task stream when it stops.
_END_REPORT_SECONDS = 2.0
# How long a snapshot request waits for the one before it to finish before it is refused.
_CLAIM_WAIT_SECONDS = 1.0
_SNAPSHOT_BOUNDS: Bounds = {
    "actions": {"wait_seconds": Bound(30, 30)},
    "mcp": {"wait_seconds": Bound(50, 40)},
}


# --- inputs --------------------------------------------------------------------------------------


class SnapshotCreate(Input):
    workspace_id: WorkspaceId
    label: Label = ""
    ttl_seconds: int | None = Field(
        None,
        ge=60,
        le=MAX_TTL_SECONDS,
        description="Then delete it (default: keep).",
    )
    wait_seconds: float = Field(
        MAX_SNAPSHOT_WAIT, ge=0, le=MAX_SNAPSHOT_WAIT, description="Then answer state taking."
    )


class SnapshotListInput(Input):
    workspace_id: WorkspaceId


class SnapshotRef(Input):
    workspace_id: WorkspaceId
    snapshot_id: SnapshotId


class ResumeInput(Input):
    workspace_id: WorkspaceId
    snapshot_id: SnapshotId | None = Field(None, description="Default: the latest.")


class ForkInput(Input):
    workspace_id: WorkspaceId
    snapshot_id: SnapshotId | None = Field(None, description="Default: one taken now.")
    idempotency_key: IdempotencyKey | None = Field(None, description="The same key, the same fork.")


# --- outputs -------------------------------------------------------------------------------------


class Snapshot(Output):
    snapshot_id: str = Field(description="The snapshot's id.")
    state: Literal["ready", "taking"] = Field(
        default="ready",
        description="ready: it exists and can be resumed or forked; taking: still being taken "
        "(follow progress_stream_id; it is listed once ready).",
    )
    progress_stream_id: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="The task stream (tk-…) of its progress: read it with stream_events until "
        "done; the exit event has the snapshot as 'result', or 'error'.",
    )
    workspace_id: str = Field(description="The workspace it was taken of.")
    kind: SnapshotKind = Field(description="manual, exit, idle or safety.")
    label: str = Field(default="", description="The label it was given.")
    created_at: str = Field(description="When it was taken (RFC 3339, UTC).")
    expires_at: str | None = Field(
        default=None, description="When it will be deleted; null: kept until deleted."
    )
    expired: bool = Field(default=False, description="It has expired and cannot be used.")
    size_bytes: int | None = Field(default=None, description="Its size, where known.")
    repos: dict[str, str] = Field(
        default_factory=dict, description="Each recorded repository's path -> its git HEAD."
    )


class SnapshotList(Output):
    snapshots: list[Snapshot] = Field(description="The workspace's snapshots, oldest first.")


class SnapshotDeleted(Output):
    workspace_id: str = Field(description="The workspace.")
    snapshot_id: str = Field(description="The snapshot deleted.")
    deleted: bool = Field(description="It is deleted now.")


def snapshot_out(record: SnapshotRecord, stream_id: str | None = None) -> Snapshot:
    return Snapshot.model_validate(
        {**record.model_dump(), "expired": record.expired(), "progress_stream_id": stream_id}
    )


# --- operations ----------------------------------------------------------------------------------


@declare(
    method="POST",
    path=SN,
    hints=WRITE,
    summary="Snapshot the workspace's files and repositories' HEADs.",
    limits="Taking after wait_seconds: follow progress_stream_id with stream_events (its exit "
    "event holds the snapshot).",
    bounds=_SNAPSHOT_BOUNDS,
)
async def workspace_snapshot(svc: Service, inp: SnapshotCreate) -> Snapshot:
    ws = inp.workspace_id
    # One snapshot of a workspace at a time from a gateway: they are bounded, and a second one
    # while the first is taken would only copy the same files.
    key = f"snapshot:{ws}"
    # A snapshot at its very end (listed already, its record being read back) is waited for,
    # not refused: "wait for it to be listed" must be enough.
    if not await svc.claim_within(key, _CLAIM_WAIT_SECONDS):
        raise ConflictError(
            f"a snapshot of workspace {ws} is being taken; wait for it to be listed",
            field="workspace_id",
        )
    try:
        plan = await plan_snapshot(svc, ws, "manual", label=inp.label, ttl_seconds=inp.ttl_seconds)
        stream = await TaskStream.open(
            svc, ws, "workspace_snapshot", {"snapshot_id": plan.spec.snapshot_id}
        )
    except BaseException:
        svc.release(key)
        raise
    job = svc.spawn(_snapshot_job(svc, ws, plan, stream, key))
    try:
        record = await asyncio.wait_for(asyncio.shield(job), wait_budget(inp.wait_seconds))
    except TimeoutError:
        stream.reporter = None  # the caller has its answer: its notifications end here
        return _taking(ws, plan, stream.task_id)
    return snapshot_out(record, stream.task_id)


async def _snapshot_job(
    svc: Service, ws: str, plan: SnapshotPlan, stream: TaskStream, key: str
) -> SnapshotRecord:
    """The snapshot's work, in a task of its own: it goes on when the call that started it
    has answered, so the call's deadline is not its own."""
    ANSWER_BY.set(None)
    stream.keep_alive()
    try:
        record = await make_snapshot(svc, ws, plan, stream)
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            error: WorkspaceError = UpstreamError(
                f"the gateway stopped before snapshot {plan.spec.snapshot_id} was taken"
            )
        else:
            error = svc.caller_error(exc)
        with contextlib.suppress(BaseException):
            async with asyncio.timeout(_END_REPORT_SECONDS):
                await stream.fail(error)
        raise
    finally:
        svc.release(key)
    await stream.finish(snapshot_out(record).model_dump(mode="json"))
    return record


def _taking(ws: str, plan: SnapshotPlan, stream_id: str | None) -> Snapshot:
    """The answer for a snapshot still being taken: what it will be."""
    spec = plan.spec
    started = datetime.now(UTC)
    return Snapshot(
        snapshot_id=spec.snapshot_id,
        state="taking",
        progress_stream_id=stream_id,
        workspace_id=ws,
        kind=spec.kind,
        label=spec.label,
        created_at=utc_now(),
        expires_at=spec.expires_at(started),
        repos=dict(spec.repos),
    )


@declare(method="GET", path=SN, hints=READ, summary="List a workspace's snapshots.")
async def workspace_snapshot_list(svc: Service, inp: SnapshotListInput) -> SnapshotList:
    records = await svc.driver.list_snapshots(inp.workspace_id)
    return SnapshotList(snapshots=[snapshot_out(r) for r in records])


@declare(
    method="DELETE",
    path=SN + "/{snapshot_id}",
    hints=DESTROY,
    summary="Delete a snapshot.",
)
async def workspace_snapshot_delete(svc: Service, inp: SnapshotRef) -> SnapshotDeleted:
    await svc.driver.delete_snapshot(inp.workspace_id, inp.snapshot_id)
    return SnapshotDeleted(workspace_id=inp.workspace_id, snapshot_id=inp.snapshot_id, deleted=True)


@declare(
    method="POST",
    path=WS + "/resume",
    hints=WRITE,
    summary="Resume a workspace from a snapshot: the same id, files, tags and repositories.",
    limits="Commands that were running are reported lost.",
)
async def workspace_resume(svc: Service, inp: ResumeInput) -> Workspace:
    _, resumed = await resume_workspace(svc, inp.workspace_id, inp.snapshot_id)
    await note_resume(svc, resumed)
    # Read again: the answer shows the trace the resume left.
    record = await svc.driver.get(inp.workspace_id)
    return workspace_out(record, resumed_from=resumed.snapshot.snapshot_id)


@declare(
    method="POST",
    path=WS + "/fork",
    hints=WRITE,
    summary="Fork a workspace: a new one from one of its snapshots, with its lineage.",
)
async def workspace_fork(svc: Service, inp: ForkInput) -> Workspace:
    parent = await svc.driver.get(inp.workspace_id)
    key = inp.idempotency_key
    tags = {
        k: v
        for k, v in parent.tags.items()
        if k != policy.IDEMPOTENCY_TAG and k not in policy.WORKSPACE_TAGS
    }
    if key is None:
        return workspace_out(await _fork(svc, policy.new_id("ws"), parent, inp.snapshot_id, tags))
    # One fork per parent and key: the key a fork records says which parent it is of.
    tags[policy.IDEMPOTENCY_TAG] = _fork_key(inp.workspace_id, key)
    scope = f"fork\x00{inp.workspace_id}"
    forked = await once_per_key(
        svc, scope, key, lambda ws: _fork(svc, ws, parent, inp.snapshot_id, tags)
    )
    return workspace_out(forked)


async def _fork(
    svc: Service,
    workspace_id: str,
    parent: WorkspaceRecord,
    snapshot_id: str | None,
    tags: dict[str, str],
) -> WorkspaceRecord:
    if snapshot_id is None:
        snapshot = await take_snapshot(svc, parent.workspace_id, "manual", label="fork")
    else:
        snapshot = await usable_snapshot(svc, parent.workspace_id, snapshot_id)
    # The fork carries the snapshot's repository tags (its files have those repositories).
    tags = {k: v for k, v in tags.items() if not k.startswith("repo-")}
    tags.update({k: v for k, v in snapshot.tags.items() if k.startswith("repo-")})
    lineage = Lineage(
        parent_workspace_id=parent.workspace_id,
        snapshot_id=snapshot.snapshot_id,
        repos=dict(snapshot.repos),
        forked_at=utc_now(),
    )
    # Resources and network as the parent's; secrets are not inherited (a fork asks anew).
    resources: dict[str, Any] = dict(parent.resources)
    spec = WorkspaceSpec(tags=tags, block_network=parent.block_network, resources=resources)
    # Starting from a snapshot copies it (local) or starts its image (Modal): long for a big
    # tree, and without progress of its own.
    async with reported_while(
        f"fork: starting {workspace_id} from {snapshot.snapshot_id}",
        f"fork: still starting {workspace_id} ({{seconds}} s)",
        f"fork: {workspace_id} started",
    ):
        return await svc.driver.fork(snapshot, workspace_id, spec, lineage)


def _fork_key(parent_id: str, key: str) -> str:
    # In the idempotency key's own alphabet and length: the parent and a digest of the key.
    return f"fork-{parent_id[3:]}-{hashlib.sha256(key.encode()).hexdigest()}"


__all__ = ["Snapshot", "SnapshotList", "snapshot_out"]
