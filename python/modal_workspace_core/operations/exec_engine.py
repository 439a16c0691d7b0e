"""The engine the gateway runs commands with: an exec started in a workspace and followed to its
end (or for as long as the caller waits), its output captured head and tail, and the short git
queries the gateway makes for itself. The exec operations (`execs`) and every other domain that
runs a command (repo, lifecycle) use it; it knows no operation.
"""

from __future__ import annotations

import base64
import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import policy
from ..drivers.base import WorkspaceRecord
from ..errors import ConflictError
from ..path_view import host_path
from ..runtime.call import PROGRESS
from .machinery.fields import MAX_WAIT_SECONDS

if TYPE_CHECKING:
    from ..runtime.service import Service

__all__ = ["Capture", "Finished", "drain", "event_bytes", "exec_args", "git_query", "run_to_end"]

# The agent holds an event to 16 KiB, so a page of this budget always holds one.
_DRAIN_PAGE_BYTES = 1_048_576


def exec_args(
    record: WorkspaceRecord,
    exec_id: str,
    *,
    command: str | None = None,
    argv: list[str] | None = None,
    workdir: str | None = None,
    env: dict[str, str] | None = None,
    timeout_seconds: float | None = None,
    pty: dict[str, int] | None = None,
    secrets: list[str] | None = None,
    internal: bool = False,
    report_metrics: bool = False,
) -> dict[str, Any]:
    """`exec.start`'s arguments. `internal` marks the gateway's own exec (git for a repo's
    status), which the agent leaves out of `exec.list`: no client input ever sets it.
    `report_metrics` has the agent tee the `::metric` lines of its output into the workspace's
    metrics stream (an experiment's run)."""
    args: dict[str, Any] = {"exec_id": exec_id, "env": dict(env or {})}
    if argv is not None:
        args["argv"] = argv
    else:
        args["command"] = command
    args["workdir"] = host_path(record, workdir) if workdir else record.root
    if timeout_seconds is not None:
        args["timeout_seconds"] = timeout_seconds
    if pty:
        args["pty"] = pty  # {"rows", "cols"}: the agent checks the bounds
    if secrets:
        args["secrets"] = secrets  # values to redact; they travel only in this request's header
    if internal:
        args["internal"] = True
    if report_metrics:
        args["report_metrics"] = True
    return args


def event_bytes(event: dict[str, Any]) -> bytes:
    if event.get("data_b64") is not None:
        return base64.b64decode(event["data_b64"])
    data = event.get("data")
    return data.encode() if isinstance(data, str) else b""


@dataclass
class Capture:
    """One output stream, capped: the first half of the budget and the last half are kept."""

    cap: int
    head_only: bool = False
    total: int = 0
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)

    def add(self, data: bytes) -> None:
        self.total += len(data)
        head_cap = self.cap if self.head_only else self.cap // 2
        room = head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and not self.head_only:
            self.tail += data
            del self.tail[: max(0, len(self.tail) - (self.cap - head_cap))]

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def text(self) -> str:
        head = self.head.decode(errors="replace")
        if not self.truncated:
            return head + self.tail.decode(errors="replace")
        omitted = self.total - len(self.head) - len(self.tail)
        marker = f"\n[... {omitted} bytes omitted ...]\n"
        return head + marker + self.tail.decode(errors="replace")


@dataclass
class Finished:
    exec_id: str
    status: dict[str, Any]
    stdout: Capture
    stderr: Capture


async def run_to_end(
    svc: Service,
    record: WorkspaceRecord,
    *,
    timeout_seconds: float,
    cap: int,
    head_only: bool = False,
    stdin: bytes = b"",
    wait_seconds: float | None = None,
    **spec: Any,
) -> Finished:
    """Starts an exec, closes its stdin after `stdin`, and drains its events to the end, or
    until `wait_seconds` have passed (the exec then goes on: its status says running)."""
    ws = record.workspace_id
    exec_id = policy.new_id("ex")
    args = exec_args(record, exec_id, timeout_seconds=timeout_seconds, **spec)
    await svc.request(ws, "exec.start", args)
    # A command that has already ended has closed its stdin: that is no failure of the run.
    with contextlib.suppress(ConflictError):
        await svc.request(ws, "exec.input", {"exec_id": exec_id, "eof": True}, stdin)
    return await drain(
        svc,
        ws,
        exec_id,
        timeout_seconds=timeout_seconds,
        cap=cap,
        head_only=head_only,
        wait_seconds=wait_seconds,
    )


# A gateway's own git query: no prompt, no lock taken (it must not block the workspace's git).
_QUERY_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}


async def git_query(
    svc: Service, record: WorkspaceRecord, argv: list[str], *, cap: int = 4096
) -> Finished:
    """A short git command the gateway runs for itself in the workspace (out of `exec.list`),
    whose first `cap` bytes of output it reads: a repository's origin, its branch, its HEAD.
    Its output is the gateway's, not progress of the caller's work: none is reported."""
    quiet = PROGRESS.set(None)
    try:
        return await run_to_end(
            svc,
            record,
            argv=argv,
            env=dict(_QUERY_ENV),
            timeout_seconds=60,
            cap=cap,
            head_only=True,
            internal=True,
        )
    finally:
        PROGRESS.reset(quiet)


async def drain(
    svc: Service,
    ws: str,
    exec_id: str,
    *,
    timeout_seconds: float,
    cap: int,
    head_only: bool = False,
    wait_seconds: float | None = None,
) -> Finished:
    """Reads a started exec's output to its end (or for `wait_seconds`), then its status."""
    out, err = Capture(cap, head_only), Capture(cap, head_only)
    cursor = 0
    # The agent kills the command at its timeout; this deadline only guards a lost channel.
    started = time.monotonic()
    deadline = started + timeout_seconds + 30
    # The caller's patience: past it, the answer is what ran so far.
    answer_by = started + wait_seconds if wait_seconds is not None else deadline
    while True:
        wait = max(0.0, min(MAX_WAIT_SECONDS, answer_by - time.monotonic()))
        page = await svc.read_events(
            ws, exec_id, cursor, max_events=10_000, max_bytes=_DRAIN_PAGE_BYTES, wait_seconds=wait
        )
        latest = b""
        for event in page.events:
            kind = event.get("type")
            if kind in ("stdout", "stderr"):
                data = event_bytes(event)
                (out if kind == "stdout" else err).add(data)
                latest = data or latest
        cursor = page.next_cursor
        report = PROGRESS.get()
        if report is not None and latest:
            line = latest.decode(errors="replace").replace("\r", "\n").strip().split("\n")[-1]
            await report(float(out.total + err.total), line[-200:])
        if page.done:
            break
        if time.monotonic() >= answer_by and wait_seconds is not None:
            break
        if time.monotonic() > deadline:
            raise TimeoutError
    status, _ = await svc.request(ws, "exec.status", {"exec_id": exec_id})
    return Finished(exec_id, status, out, err)
