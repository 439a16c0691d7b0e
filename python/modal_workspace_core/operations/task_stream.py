"""A long operation the gateway does itself (a snapshot) reported on the common event contract:
a task stream (`tk-…`) the workspace's agent keeps, read with `stream_events` like an exec's, so
that a caller whose call ended before the work did (GPT Actions' 45 s), or who asks another
gateway, follows the same events. The stream opens `running`, carries `progress` events and
ends with an `exit` holding the result (or the error); a gateway that stops reporting leaves it
`lost` when its lease runs out, never `running` for ever.

Where the caller's transport carries progress (MCP), each report goes there too while the
caller waits. Reporting is never the work: a report the agent does not take is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import policy
from ..errors import WorkspaceError
from ..runtime.call import ANSWER_BY, PROGRESS, Reporter

if TYPE_CHECKING:
    from ..runtime.service import Service

log = logging.getLogger("modal_workspace_core.operations")

# How long the agent keeps a task without word from its gateway, and how often a task with no
# progress of its own (a Modal snapshot) says it is still under way.
LEASE_SECONDS = 60.0
HEARTBEAT_SECONDS = 10.0
# The fewest seconds between two progress events of one task (the last one always goes).
_REPORT_EVERY = 0.5
# How long before its surface's deadline a call that waits for a task answers.
_ANSWER_MARGIN_SECONDS = 2.0


def wait_budget(asked: float) -> float:
    """How long a call waits for its task before it answers with the task's stream: what it
    asked, within its surface's time."""
    answer_by = ANSWER_BY.get()
    if answer_by is None:
        return asked
    return max(0.0, min(asked, answer_by - time.monotonic() - _ANSWER_MARGIN_SECONDS))


class TaskStream:
    """One task's stream; `open` it, `report` on it, then `finish` or `fail` it once."""

    def __init__(self, svc: Service, workspace_id: str, task_id: str | None) -> None:
        self._svc = svc
        self._workspace_id = workspace_id
        self.task_id = task_id  # None: the agent took no stream; reports go to MCP alone
        # The caller's progress notifications, until it stops waiting.
        self.reporter: Reporter | None = PROGRESS.get()
        self._last_report = 0.0
        self._heartbeat: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, svc: Service, workspace_id: str, operation: str, fields: Mapping[str, Any]
    ) -> TaskStream:
        """A new task stream of `operation` in the workspace's agent, its first event holding
        `fields`. An agent that cannot take one leaves the task without a stream."""
        task_id = policy.new_id("tk")
        args = {
            "task_id": task_id,
            "operation": operation,
            "lease_seconds": LEASE_SECONDS,
            "fields": dict(fields),
        }
        try:
            await svc.request(workspace_id, "task.start", args)
        except WorkspaceError as e:
            log.info("no task stream for %s of %s: %s", operation, workspace_id, e)
            return cls(svc, workspace_id, None)
        return cls(svc, workspace_id, task_id)

    def keep_alive(self) -> None:
        """Renews the task's lease from now on, for as long as the work runs (call it from the
        task doing the work: the heartbeat shares its context)."""
        if self.task_id is not None and self._heartbeat is None:
            self._heartbeat = asyncio.get_running_loop().create_task(self._beat())

    async def report(self, done: int, total: int | None, message: str) -> None:
        """How far the work has come (bytes). Reports closer than half a second apart are
        dropped, except one that completes the work."""
        now = time.monotonic()
        if now - self._last_report < _REPORT_EVERY and (total is None or done < total):
            return
        self._last_report = now
        if self.reporter is not None:
            with contextlib.suppress(Exception):
                await self.reporter(float(done), message)
        args: dict[str, Any] = {"done": done, "message": message[:200]}
        if total is not None:
            args["total"] = total
        await self._send("task.progress", args)

    async def finish(self, result: Mapping[str, Any]) -> None:
        await self._end({"state": "finished", "result": dict(result)})

    async def fail(self, error: WorkspaceError) -> None:
        await self._end({"state": "failed", "error": error.to_dict()})

    async def _end(self, args: dict[str, Any]) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        self.reporter = None
        await self._send("task.end", args)

    async def _beat(self) -> None:
        """Renews the lease while the work gives no progress of its own."""
        started = time.monotonic()
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            if time.monotonic() - self._last_report >= HEARTBEAT_SECONDS:
                elapsed = int(time.monotonic() - started)
                await self._send("task.progress", {"message": f"still under way after {elapsed} s"})

    async def _send(self, op: str, args: dict[str, Any]) -> None:
        if self.task_id is None:
            return
        try:
            await self._svc.request(self._workspace_id, op, {"task_id": self.task_id, **args})
        except WorkspaceError as e:
            log.debug("%s of task %s not taken: %s", op, self.task_id, e)
