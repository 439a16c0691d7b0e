"""Following an experiment's run: a background task per run (`follow_run`) that reads the run's
output from its exec's durable log, folds in the `::metric` lines it prints (`experiment_lines`)
and the workspace's metrics samples taken meanwhile (`experiment_system`), and records the run in
the shared store every few seconds and once it ended. A gateway that restarted, or another one,
follows it again from the start of its log. Following is the gateway's own background work: it
leaves the starting call's context and never resumes a workspace (`RESUMES`).
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..drivers.base import utc_now
from ..errors import ConflictError, InvalidArgumentError, NotFoundError, WorkspaceError
from ..runtime.call import ANSWER_BY, CALL, PROGRESS, RESUMES
from .exec_engine import event_bytes
from .experiment_lines import MetricLog
from .experiment_records import ExperimentStore, RunRecord, RunSeries, RunState
from .experiment_system import SystemFold
from .template_records import parse_stamp

if TYPE_CHECKING:
    from ..runtime.service import Service

__all__ = ["follow_run", "instant"]

log = logging.getLogger(__name__)

# How often a running run's record is rewritten with what it reported so far.
WRITE_EVERY_SECONDS = 5.0
# The page a follower reads the exec's log in.
_PAGE_BYTES = 1_048_576
_STATES: dict[str, RunState] = {
    "finished": "finished",
    "failed": "failed",
    "cancelled": "cancelled",
    "timed_out": "timed_out",
    "lost": "lost",
}


def rfc3339(stamp: object) -> str | None:
    """An event's time as the records write times (`utc_now`'s form), if it is one."""
    if not isinstance(stamp, str):
        return None
    when = instant(stamp)
    if when.year == datetime.max.year:
        return None
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def instant(stamp: object) -> datetime:
    """A record's or an event's time; one that is not a time (the agent's word, bounded) sorts
    after every other."""
    parsed = parse_stamp(stamp) if isinstance(stamp, str) else None
    return parsed if parsed is not None else datetime.max.replace(tzinfo=UTC)


def _claim(run_id: str) -> str:
    return f"experiment:{run_id}"


async def follow_run(svc: Service, run: RunRecord) -> None:
    """Reads the run's output to its end, folding in what it reports and what its workspace's
    metrics stream sampled meanwhile, and records the run as it goes and once it ended. One
    follower per run in a process; never resumes its workspace."""
    if not svc.claim(_claim(run.run_id)):
        return
    # Background work, not the call that started it: none of that call's deadline (a run
    # outlasts the surface's answer), its cached records, its progress; and no resumes.
    ANSWER_BY.set(None)
    CALL.set(None)
    PROGRESS.set(None)
    RESUMES.set(False)
    store = ExperimentStore(svc.shared_store)
    metrics = MetricLog()
    started = instant(run.started_at)
    system = _SystemReader(svc, run.workspace_id, started)
    cursor, at, written = 0, 0.0, time.monotonic()
    ended: str | None = None  # the exit event's time
    try:
        while True:
            page = await svc.read_events(
                run.workspace_id,
                run.exec_id,
                cursor,
                max_events=10_000,
                max_bytes=_PAGE_BYTES,
                wait_seconds=20,
            )
            for event in page.events:
                at = max(at, (instant(event.get("timestamp")) - started).total_seconds())
                if event.get("type") == "exit":
                    ended = event.get("timestamp")
                if event.get("type") in ("stdout", "stderr"):
                    metrics.feed(str(event["type"]), event_bytes(event), at)
            cursor = page.next_cursor
            await system.catch_up(instant(ended) if ended else None)
            if page.done:
                break
            if time.monotonic() - written >= WRITE_EVERY_SECONDS:
                await _record(store, run, metrics, system.fold, None)
                written = time.monotonic()
        metrics.finish(at)
        status, _ = await svc.request(run.workspace_id, "exec.status", {"exec_id": run.exec_id})
        await _record(store, run, metrics, system.fold, status, ended)
    except WorkspaceError as exc:
        # Its workspace ended (or cannot be reached without resuming it): what was read stays.
        log.info("run %s of %s: %s", run.run_id, run.workspace_id, exc)
        metrics.finish(at)
        lost: dict[str, object] = {"state": "lost", "error": str(exc)[:300]}
        await _record(store, run, metrics, system.fold, lost, None)
    finally:
        svc.release(_claim(run.run_id))


class _SystemReader:
    """The workspace's metrics stream, read alongside a run: the samples taken from its start
    to its end, folded (`SystemFold`). An agent without metrics, or a stream that cannot be
    read, leaves the run without a `system` summary; a gap (`cursor_expired`) only thins it."""

    def __init__(self, svc: Service, workspace_id: str, started: datetime) -> None:
        self.svc, self.workspace_id, self.started = svc, workspace_id, started
        self.fold = SystemFold()
        self.stream_id: str | None = None
        self.cursor = 0
        self.off = False

    async def catch_up(self, until: datetime | None) -> None:
        if self.off:
            return
        try:
            if self.stream_id is None:
                status, _ = await self.svc.request(self.workspace_id, "metrics.status", {})
                self.stream_id = str(status.get("stream_id") or "") or None
                if self.stream_id is None:
                    self.off = True
                    return
            page = await self.svc.read_events(
                self.workspace_id,
                self.stream_id,
                self.cursor,
                max_events=10_000,
                max_bytes=_PAGE_BYTES,
                wait_seconds=0,
            )
        except (InvalidArgumentError, NotFoundError, ConflictError) as exc:
            log.info("the metrics of %s are not read: %s", self.workspace_id, exc)
            self.off = True
            return
        self.cursor = page.next_cursor
        for event in page.events:
            when = instant(event.get("timestamp"))
            if event.get("type") != "metrics" or when < self.started:
                continue
            if until is not None and when > until:
                continue
            self.fold.add(event, (when - self.started).total_seconds())


async def _record(
    store: ExperimentStore,
    run: RunRecord,
    metrics: MetricLog,
    system: SystemFold,
    status: dict[str, object] | None,
    ended_at: str | None = None,
) -> None:
    """The run as read so far; with `status` (the exec's, once it ended), how it ended."""
    update: dict[str, object] = {
        "metrics": dict(metrics.summary),
        "metric_lines_refused": metrics.refused,
        "system": system.summary(),
    }
    if status is not None:
        ended = rfc3339(ended_at) or utc_now()
        update |= {
            "state": _STATES.get(str(status.get("state")), "lost"),
            "ended_at": ended,
            "returncode": status.get("returncode"),
            "error": (str(status["error"])[:300] if status.get("error") else None),
            "wall_seconds": round((instant(ended) - instant(run.started_at)).total_seconds(), 3),
        }
    series = RunSeries(points=metrics.points(), system=system.points())
    await store.write_series(run.workspace_id, run.run_id, series)
    await store.write(run.model_copy(update=update))
