"""The gateway's lifecycle sweep: what happens to workspaces when nobody calls.

Every `MODAL_WORKSPACE_JANITOR_SECONDS` it looks at every workspace once and, where one is due:
- suspends a workspace idle past its `idle_timeout_seconds` (a snapshot, then nothing runs; the
  next operation that needs it resumes it), where the provider does not (Modal ends an idle
  sandbox itself, with its exit snapshot: `Driver.ends_idle_workspaces`);
- takes a safety snapshot `MODAL_WORKSPACE_SAFETY_MARGIN_SECONDS` before a workspace's lifetime
  (`timeout_seconds`) ends, and at the end suspends it with a final snapshot (where the provider
  ends it first, as Modal does, its exit snapshot is that final one);
- deletes snapshots that have expired, and suspended or terminated workspaces (snapshots and
  all) past `MODAL_WORKSPACE_RETENTION_SECONDS`;
- ends what the driver's host started for a workspace and outlived it (`end_strays`, where a
  driver has such helpers: the local driver's pasta, when a crash took the watcher that ends
  it with its sandbox);
- asks each template's repository whether its branch moved, at most once per template per
  `MODAL_WORKSPACE_TEMPLATE_CHECK_SECONDS`, and rebuilds the template when it did
  (`operations.template_checks`). A template's builds are kept as long as the template is: the
  retention leaves their workspaces alone.

Every action is logged and kept on the workspace (`lifecycle`). Several gateways may sweep the
same workspaces (Modal runs as many gateway containers as the load needs, and a scheduled
function sweeps when none runs): each due action is claimed first in the shared store, where
exactly one claim of it wins (`SharedStore.create`), and only the winner acts. A claim names the
action, what makes it due (the run of the workspace it is for, the snapshot that expired) and a
window of `CLAIM_WINDOW_SECONDS`: a gateway that claimed an action and died before it acted
leaves it to the next window, where the action is decided again on a fresh record.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import socket
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from .drivers.base import LifecycleNote, SnapshotKind, SuspendReason, WorkspaceRecord, utc_now
from .errors import WorkspaceError
from .operations.experiment_records import ExperimentStore
from .operations.lifecycle import take_snapshot
from .operations.template_checks import check_templates, recorded_build_workspaces

if TYPE_CHECKING:
    from .runtime.service import Service

__all__ = ["Janitor", "start_sweep"]

log = logging.getLogger(__name__)

# The service's claim on its one sweep: held for its life, so a second start is a no-op.
_SWEEP_CLAIM = "lifecycle-sweep"
# How long a claim of a due action keeps the other gateways from it: longer than the slowest
# action (a snapshot may take `snapshot_timeout_seconds`, 900 s on Modal).
CLAIM_WINDOW_SECONDS = 1800
# Where claims live in the shared store: one folder per workspace, removed when it is purged.
CLAIMS = "sweep"


def start_sweep(svc: Service) -> None:
    """Starts the sweep among `svc`'s background work (cancelled when it closes), unless the
    settings turn it off; once per service, however many times the serving app starts."""
    if svc.settings.janitor_seconds <= 0 or not svc.claim(_SWEEP_CLAIM):
        return
    svc.spawn(Janitor(svc).run())


def _parse(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


class Janitor:
    """One gateway's sweep over every workspace (see the module's docstring)."""

    def __init__(self, svc: Service) -> None:
        self.svc = svc
        self.settings = svc.settings
        # The workspaces of the templates' builds, read at most once a sweep.
        self._builds: set[str] | None = None

    async def run(self) -> None:
        """Sweeps until cancelled; a failed sweep is logged and the next one tries again."""
        interval = self.settings.janitor_seconds
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sweep()
            except Exception:
                log.exception("the lifecycle sweep failed; trying again in %s s", interval)

    async def sweep(self, now: datetime | None = None) -> None:
        now = now or datetime.now(UTC)
        end_strays = getattr(self.svc.driver, "end_strays", None)
        if end_strays is not None:
            try:
                await end_strays()
            except Exception:
                log.exception("the sweep could not end the helpers that outlived workspaces")
        self._builds = None
        for record in await self.svc.driver.list():
            with contextlib.suppress(WorkspaceError):
                await self._one(record, now)
        try:
            await check_templates(self.svc, now)
        except Exception:
            log.exception("the sweep could not check the templates")

    async def _one(self, record: WorkspaceRecord, now: datetime) -> None:
        ws = record.workspace_id
        if record.state in ("suspended", "terminated"):
            await self._expire_snapshots(ws, now)
            ended = _parse(record.suspension.at if record.suspension else record.ended_at)
            retention = timedelta(seconds=self.settings.retention_seconds)
            if ended is not None and now - ended >= retention:
                if await self._is_template_build(ws):
                    return  # kept as long as its template is (`template_delete` removes it)
                if not await self._claim(ws, "purge", str(ended), now):
                    return
                await self._act(ws, "purged", f"past the retention of {retention}")
                await self.svc.drop_agent(ws)
                await self.svc.driver.destroy(ws, keep_snapshots=False)
                await ExperimentStore(self.svc.shared_store).forget(ws)
                await self.svc.shared_store.remove(f"{CLAIMS}/{ws}")
            return
        await self._expire_snapshots(ws, now)
        started = _parse(record.started_at or record.created_at)
        lifetime = record.resources.get("timeout_seconds")
        if started is not None and isinstance(lifetime, int):
            ends = started + timedelta(seconds=lifetime)
            if now >= ends:
                if await self._claim(ws, "lifetime", str(started), now):
                    why = f"its lifetime of {lifetime} s ended"
                    await self._suspend(ws, "lifetime", "exit", why)
                return
            margin = timedelta(seconds=self.settings.safety_margin_seconds)
            if (
                now >= ends - margin
                and not await self._has_safety_snapshot(ws, started)
                and await self._claim(ws, "safety", str(started), now)
                # Decided again once claimed: another gateway's claim of an earlier window
                # may have taken it meanwhile.
                and not await self._has_safety_snapshot(ws, started)
            ):
                snapshot = await self._snapshot(ws, "safety")
                await self._act(ws, "snapshot", f"safety snapshot {snapshot} before its lifetime")
        idle = record.resources.get("idle_timeout_seconds")
        if getattr(self.svc.driver, "ends_idle_workspaces", False):
            return  # the provider ends an idle one, with its exit snapshot
        if (
            isinstance(idle, int)
            and await self._idle_for(ws, record) >= idle
            and await self._claim(ws, "idle", str(started), now)
        ):
            await self._suspend(ws, "idle", "idle", f"idle for {idle} s")

    async def _is_template_build(self, ws: str) -> bool:
        """Whether `ws` is the workspace of a template's build on record (read once a sweep,
        the first time a retention is due)."""
        if self._builds is None:
            self._builds = await recorded_build_workspaces(self.svc)
        return ws in self._builds

    async def _has_safety_snapshot(self, ws: str, started: datetime) -> bool:
        """Whether this run of the workspace has its safety snapshot already: asked of the
        driver's record, so that another gateway (or this one, restarted) does not take a
        second."""
        for snapshot in await self.svc.driver.list_snapshots(ws):
            taken = _parse(snapshot.created_at)
            if snapshot.kind == "safety" and taken is not None and taken >= started:
                return True
        return False

    async def _idle_for(self, ws: str, record: WorkspaceRecord) -> float:
        """Seconds since the workspace was last used: an operation on it, or a command of it
        running (a running command is use, however quiet)."""
        used = self.svc.last_used(ws)
        listed, _ = await self.svc.request(ws, "exec.list", {})
        execs = listed.get("execs") or []
        if any(e.get("state") in ("starting", "running") for e in execs):
            return 0.0
        since = time.monotonic() - used
        ended = [_parse(e.get("ended_at")) for e in execs]
        latest = max((t for t in ended if t is not None), default=None)
        started = _parse(record.started_at or record.created_at)
        for mark in (latest, started):
            if mark is not None:
                since = min(since, (datetime.now(UTC) - mark).total_seconds())
        return since

    async def _snapshot(self, ws: str, kind: SnapshotKind) -> str:
        return (await take_snapshot(self.svc, ws, kind, label=f"{kind} (lifecycle)")).snapshot_id

    async def _suspend(self, ws: str, reason: SuspendReason, kind: SnapshotKind, why: str) -> None:
        fresh = await self.svc.driver.get(ws)
        if fresh.state not in ("running", "stopped"):
            return  # another gateway (or the provider) got there first
        snapshot = await self._snapshot(ws, kind)
        await self.svc.drop_agent(ws)
        await self.svc.driver.suspend(ws, reason, snapshot)
        await self._act(ws, "suspended", f"{why}; its files are in snapshot {snapshot}")

    async def _expire_snapshots(self, ws: str, now: datetime) -> None:
        for snapshot in await self.svc.driver.list_snapshots(ws):
            if snapshot.expired(now) and await self._claim(ws, "expire", snapshot.snapshot_id, now):
                with contextlib.suppress(WorkspaceError):
                    await self.svc.driver.delete_snapshot(ws, snapshot.snapshot_id)
                    await self._act(
                        ws,
                        "snapshot_deleted",
                        f"snapshot {snapshot.snapshot_id} expired at {snapshot.expires_at}",
                    )

    async def _claim(self, ws: str, action: str, due: str, now: datetime) -> bool:
        """Whether this gateway is the one that takes `action` on `ws` (due because of `due`)
        in the current window: the first to create the claim's record, of every gateway."""
        window = int(now.timestamp()) // CLAIM_WINDOW_SECONDS
        instance = hashlib.sha256(due.encode()).hexdigest()[:16]
        holder = {"host": socket.gethostname()[:64], "pid": os.getpid(), "at": utc_now()}
        key = f"{CLAIMS}/{ws}/{action}.{instance}.{window}"
        won = await self.svc.shared_store.create(key, json.dumps(holder).encode())
        if not won:
            log.info("lifecycle: %s %s is another gateway's to take", ws, action)
        return won

    async def _act(self, ws: str, action: str, detail: str) -> None:
        log.info("lifecycle: %s %s: %s", ws, action, detail)
        await self.svc.driver.note(ws, LifecycleNote(at=utc_now(), action=action, detail=detail))
