"""The steps of a workspace's lifecycle that operations and the service share: take a snapshot,
pick the one to start from, resume from it."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from .. import policy
from ..drivers.base import (
    LIFECYCLE_SNAPSHOTS_KEPT,
    MAX_LOST_EXECS_NAMED,
    MAX_SNAPSHOTS,
    LifecycleNote,
    SnapshotKind,
    SnapshotRecord,
    SnapshotSpec,
    WorkspaceRecord,
    utc_now,
)
from ..errors import ConflictError, LimitError, NotFoundError, WorkspaceError, core_refusal
from ..git import commands as gitcmd
from .exec_engine import git_query
from .task_stream import TaskStream

if TYPE_CHECKING:
    from ..runtime.service import Service

__all__ = [
    "Resumed",
    "SnapshotPlan",
    "make_snapshot",
    "note_resume",
    "plan_snapshot",
    "repo_heads",
    "resume_suspended",
    "resume_workspace",
    "take_snapshot",
    "usable_snapshot",
]

# A git object name (SHA-1 or SHA-256), the only thing kept of what the workspace's git prints.
_HEAD = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


async def repo_heads(svc: Service, record: WorkspaceRecord) -> dict[str, str]:
    """The git HEAD of each repository the workspace records (its `repo-path` tag). What the
    workspace's git prints is its own (and on an output any process of the workspace may write
    to), so only a well-formed object name is kept: shown with the snapshot, the workspace's own
    data, never decided on."""
    dest = record.tags.get("repo-path")
    if not dest:
        return {}
    done = await git_query(svc, record, gitcmd.head_argv(dest))
    head = done.stdout.head.decode(errors="replace").strip()
    if done.status.get("returncode") != 0 or not _HEAD.fullmatch(head):
        return {}
    return {dest: head}


@dataclass(frozen=True)
class SnapshotPlan:
    """A snapshot about to be taken: what it will be, and what the workspace held before."""

    spec: SnapshotSpec
    held: list[SnapshotRecord]


async def plan_snapshot(
    svc: Service,
    workspace_id: str,
    kind: SnapshotKind,
    *,
    label: str = "",
    ttl_seconds: int | None = None,
) -> SnapshotPlan:
    """The checks before a snapshot of a running workspace (suspended: refused; the limit of
    those asked for), its id, and its repositories' HEADs as they are now."""
    record = await svc.record(workspace_id)
    if record.state == "suspended":
        raise ConflictError(
            f"workspace {workspace_id} is suspended: its files are in snapshot "
            f"{record.suspension.snapshot_id if record.suspension else 'none'}; resume it first",
            field="workspace_id",
        )
    held = await svc.driver.list_snapshots(workspace_id)
    if kind == "manual" and len([s for s in held if s.kind == "manual"]) >= MAX_SNAPSHOTS:
        raise LimitError(
            "limit",
            f"workspace {workspace_id} has {MAX_SNAPSHOTS} snapshots, the most it may keep: "
            "delete one (workspace_snapshot_delete) first",
            "snapshot_id",
            status=429,
        )
    spec = SnapshotSpec(
        snapshot_id=policy.new_id("sn"),
        kind=kind,
        label=label,
        ttl_seconds=ttl_seconds,
        repos=await repo_heads(svc, record),
    )
    return SnapshotPlan(spec, held)


async def make_snapshot(
    svc: Service, workspace_id: str, plan: SnapshotPlan, stream: TaskStream
) -> SnapshotRecord:
    """Takes the planned snapshot, reporting on `stream` when it starts, the bytes copied so
    far (where the driver counts them) and when it is done."""
    spec = plan.spec

    async def progress(done: int, total: int | None) -> None:
        of = f" of {total}" if total else ""
        await stream.report(done, total, f"snapshot: {done}{of} bytes copied")

    # A snapshot can take long (Modal's has no progress of its own): say when it starts and ends.
    await stream.report(0, None, f"snapshot: taking {spec.snapshot_id}")
    taken = await svc.driver.snapshot(workspace_id, spec, progress)
    size = taken.size_bytes or 0
    await stream.report(size, size, f"snapshot: {spec.snapshot_id} done ({size} bytes)")
    if spec.kind != "manual":
        await _prune_lifecycle_snapshots(svc, workspace_id, [*plan.held, taken])
    return taken


async def take_snapshot(
    svc: Service, workspace_id: str, kind: SnapshotKind, *, label: str = ""
) -> SnapshotRecord:
    """A snapshot of a running workspace kept until deleted, within the call (the lifecycle's,
    a fork's, a terminate's): its progress goes to the caller's progress notifications, where
    it listens (MCP), not to a stream."""
    plan = await plan_snapshot(svc, workspace_id, kind, label=label)
    return await make_snapshot(svc, workspace_id, plan, TaskStream(svc, workspace_id, None))


async def _prune_lifecycle_snapshots(
    svc: Service, workspace_id: str, held: list[SnapshotRecord]
) -> None:
    """Keeps the newest `LIFECYCLE_SNAPSHOTS_KEPT` of the lifecycle's own snapshots (an idle
    workspace is suspended again and again): older ones go, never one that was asked for."""
    own = sorted(
        (s for s in held if s.kind != "manual"), key=lambda s: (s.created_at, s.snapshot_id)
    )
    for old in own[:-LIFECYCLE_SNAPSHOTS_KEPT]:
        with contextlib.suppress(NotFoundError):
            await svc.driver.delete_snapshot(workspace_id, old.snapshot_id)


async def usable_snapshot(
    svc: Service, workspace_id: str, snapshot_id: str | None
) -> SnapshotRecord:
    """The snapshot to start from: the one named, or the workspace's latest that has not
    expired. A missing one is `not_found`, an expired one `conflict`, each naming it."""
    snapshots = await svc.driver.list_snapshots(workspace_id)
    if snapshot_id is None:
        live = [s for s in snapshots if not s.expired()]
        if not live:
            expired = f" ({len(snapshots)} expired)" if snapshots else ""
            raise ConflictError(
                f"workspace {workspace_id} has no snapshot to start from{expired}",
                field="snapshot_id",
            )
        return max(live, key=lambda s: (s.created_at, s.snapshot_id))
    for snapshot in snapshots:
        if snapshot.snapshot_id == snapshot_id:
            if snapshot.expired():
                raise ConflictError(
                    f"snapshot {snapshot_id} expired at {snapshot.expires_at}; it cannot be used",
                    field="snapshot_id",
                )
            return snapshot
    raise NotFoundError(
        f"snapshot {snapshot_id} of workspace {workspace_id} does not exist (deleted, expired "
        "and removed, or never taken)",
        field="snapshot_id",
    )


@dataclass(frozen=True)
class Resumed:
    """A resume that happened: the workspace as it was before, and the snapshot it came from.
    `note_resume` keeps its trace on the workspace."""

    before: WorkspaceRecord
    snapshot: SnapshotRecord


async def resume_workspace(
    svc: Service, workspace_id: str, snapshot_id: str | None, *, only_if_suspended: bool = False
) -> tuple[WorkspaceRecord, Resumed]:
    """The workspace running again from a snapshot (its latest by default). The caller keeps
    the trace (`note_resume`): at once where it may reach the agent, else in the background."""
    # A workspace never made is a 404 before anything else; what it was is the trace's start.
    before = await svc.driver.get(workspace_id)
    snapshot = await usable_snapshot(svc, workspace_id, snapshot_id)
    await svc.drop_agent(workspace_id)
    record = await svc.driver.resume(workspace_id, snapshot, only_if_suspended=only_if_suspended)
    svc.forget_reached(workspace_id)  # the resumed agent's unsettled notes are owed again
    return record, Resumed(before, snapshot)


async def note_resume(svc: Service, resumed: Resumed) -> None:
    """Keeps on the workspace (`lifecycle`) that it ended and was resumed: when and why it ended,
    the snapshot it came back from, and the execs that were running then (the resumed agent
    reports them lost). Never fails the resume it describes."""
    before, workspace_id = resumed.before, resumed.before.workspace_id
    suspension = before.suspension
    why = suspension.reason if suspension else before.state
    ended = (suspension.at if suspension else before.ended_at) or "at an unknown time"
    more = f" ({suspension.detail[:160]})" if suspension and suspension.detail else ""
    lost: list[str] = []
    with contextlib.suppress(WorkspaceError):
        listed, _ = await svc.request(workspace_id, "exec.list", {})
        since = _instant(before.started_at or before.created_at)
        # The agent's list is the workspace's own data (its commands can write the agent's
        # records): only well-formed exec ids are kept, and nothing is decided on them.
        lost = [
            exec_id
            for e in listed.get("execs") or []
            # Lost in this run: begun (or asked for, when it never got to start) since it began.
            if isinstance(e, dict)
            and e.get("state") == "lost"
            and _instant(e.get("started_at") or e.get("created_at")) >= since
            and (exec_id := _exec_id(e.get("exec_id"))) is not None
        ]
    named = lost[:MAX_LOST_EXECS_NAMED]
    others = f" and {len(lost) - len(named)} more" if len(lost) > len(named) else ""
    lost_text = f"; lost {', '.join(named)}{others}" if lost else "; no command was running"
    detail = (
        f"it ended {ended} ({why}){more}; resumed from snapshot "
        f"{resumed.snapshot.snapshot_id}{lost_text}"
    )
    note = LifecycleNote(
        at=utc_now(),
        action="resumed",
        detail=detail,
        snapshot_id=resumed.snapshot.snapshot_id,
        lost_execs=named,
    )
    with contextlib.suppress(WorkspaceError):
        await svc.driver.note(workspace_id, note)


async def resume_suspended(svc: Service, workspace_id: str) -> str | None:
    """A suspended workspace running again from the snapshot its suspension names (else its
    latest): what `Service` calls when an operation needs the agent of one. None when it runs
    already: another gateway (or another call) resumed it first, and that one is used."""
    record = await svc.driver.get(workspace_id)
    if record.state != "suspended":
        return None
    snapshot_id = record.suspension.snapshot_id if record.suspension else None
    try:
        _, resumed = await resume_workspace(svc, workspace_id, snapshot_id, only_if_suspended=True)
    except ConflictError:
        if (await svc.driver.get(workspace_id)).state == "running":
            return None
        raise
    # In the background: the caller holds the workspace's channel lock while it resumes, and
    # the trace asks the resumed agent which execs were lost.
    svc.spawn(note_resume(svc, resumed))
    return resumed.snapshot.snapshot_id


def _instant(stamp: object) -> datetime:
    """An RFC 3339 time as the drivers and the agent write it (`Z` or an offset); the earliest
    time for one that is missing or unreadable."""
    try:
        at = datetime.fromisoformat(str(stamp)[:64].replace("Z", "+00:00"))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _exec_id(value: object) -> str | None:
    """`value` when it is an exec id, else None."""
    with contextlib.suppress(WorkspaceError), core_refusal("exec_id"):
        return policy.check_id("ex", str(value)[:64])
    return None
