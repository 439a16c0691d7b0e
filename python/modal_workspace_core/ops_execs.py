"""Handlers of commands: run to completion, and realtime execs followed by cursor pages.

Every exec is the agent's; the gateway picks exec ids (random, or derived from an idempotency
key) so that a repeated start answers the exec that already exists.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import policy
from ._core import FINAL_STATES
from .drivers.base import WorkspaceRecord
from .errors import ConflictError, InvalidArgumentError
from .event_pages import PageResult
from .models import (
    MAX_WAIT_SECONDS,
    ExecCancel,
    ExecEvents,
    ExecInput,
    ExecListInput,
    ExecRef,
    ExecRun,
    RealtimeExecStart,
    WatchEvents,
)
from .results import ExecListResult, ExecResult, ExecStatus, InputResult
from .service_core import PROGRESS, host_path

if TYPE_CHECKING:
    from .service_core import Service

# The agent holds an event to 16 KiB, so a page of this budget always holds one.
_DRAIN_PAGE_BYTES = 1_048_576
# How long a cancel waits for the exec to end: its grace period (at most this much) and slack
# for the SIGKILL and the exit to be recorded.
_CANCEL_WAIT_MAX = 20.0
_CANCEL_SLACK = 2.0


def derived_exec_id(workspace_id: str, key: str, secret: bytes) -> str:
    """The exec id an idempotency key names in one workspace: the same key, the same exec.
    Keyed with a secret of the gateway's, so that nothing in the workspace can compute the id
    ahead of the client and start an exec of its own under it."""
    message = f"{workspace_id}\x00{key}".encode()
    digest = hmac.new(secret, message, hashlib.sha256).hexdigest()
    return policy.check_id("ex", f"ex-{digest[:32]}")


def exec_args(
    record: WorkspaceRecord,
    exec_id: str,
    *,
    command: str | None = None,
    argv: list[str] | None = None,
    workdir: str | None = None,
    env: dict[str, str] | None = None,
    timeout_seconds: float | None = None,
    pty: bool = False,
    secrets: list[str] | None = None,
) -> dict[str, Any]:
    args: dict[str, Any] = {"exec_id": exec_id, "env": dict(env or {})}
    if argv is not None:
        args["argv"] = argv
    else:
        args["command"] = command
    args["workdir"] = host_path(record, workdir) if workdir else record.root
    if timeout_seconds is not None:
        args["timeout_seconds"] = timeout_seconds
    if pty:
        args["pty"] = {"rows": 24, "cols": 80}
    if secrets:
        args["secrets"] = secrets  # values to redact; they travel only in this request's header
    return args


def status_out(exec_id: str, result: dict[str, Any]) -> ExecStatus:
    return ExecStatus.model_validate({**result, "exec_id": result.get("exec_id") or exec_id})


def decode_input(text: str, encoding: str, field: str) -> bytes:
    """A client's text as bytes: base64 when `encoding` says so (refused unless valid), else
    UTF-8. A refusal names `field`."""
    if encoding != "base64":
        return text.encode()
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgumentError(f"{field}: not valid base64", field=field) from None


async def stream_page(svc: Service, inp: ExecEvents | WatchEvents, stream: str) -> PageResult:
    """One page of an exec's or a watch's events as `inp` asks; the core's page carries the
    stream's state as of that page."""
    page = await svc.read_events(
        inp.workspace_id,
        stream,
        inp.cursor,
        max_events=inp.max_events,
        max_bytes=inp.max_bytes,
        wait_seconds=inp.wait_seconds,
    )
    return PageResult(page)


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


async def workspace_exec(svc: Service, inp: ExecRun) -> ExecResult:
    record = await svc.record(inp.workspace_id)
    done = await run_to_end(
        svc,
        record,
        command=inp.command,
        workdir=inp.workdir,
        env=inp.env,
        timeout_seconds=inp.timeout_seconds,
        cap=inp.max_output_bytes,
        stdin=(inp.stdin or "").encode(),
        wait_seconds=inp.wait_seconds,
    )
    state = str(done.status.get("state", "finished"))
    error = done.status.get("error")
    return ExecResult(
        exec_id=done.exec_id,
        state=state,
        returncode=done.status.get("returncode"),
        error=str(error) if error else None,
        stdout=done.stdout.text(),
        stderr=done.stderr.text(),
        stdout_truncated=done.stdout.truncated,
        stderr_truncated=done.stderr.truncated,
        stdout_bytes=done.stdout.total,
        stderr_bytes=done.stderr.total,
        timed_out=state == "timed_out",
    )


async def workspace_realtime_exec_start(svc: Service, inp: RealtimeExecStart) -> ExecStatus:
    record = await svc.record(inp.workspace_id)
    if inp.idempotency_key is not None:
        exec_id = derived_exec_id(
            inp.workspace_id, inp.idempotency_key, svc.settings.idempotency_secret
        )
    else:
        exec_id = policy.new_id("ex")
    args = exec_args(
        record,
        exec_id,
        command=inp.command,
        workdir=inp.workdir,
        env=inp.env,
        timeout_seconds=inp.timeout_seconds,
        pty=inp.pty,
    )
    result, _ = await svc.request(inp.workspace_id, "exec.start", args)
    return status_out(exec_id, result)


async def workspace_realtime_exec_events(svc: Service, inp: ExecEvents) -> PageResult:
    return await stream_page(svc, inp, inp.exec_id)


async def workspace_realtime_exec_status(svc: Service, inp: ExecRef) -> ExecStatus:
    result, _ = await svc.request(inp.workspace_id, "exec.status", {"exec_id": inp.exec_id})
    return status_out(inp.exec_id, result)


async def workspace_realtime_exec_input(svc: Service, inp: ExecInput) -> InputResult:
    payload = decode_input(inp.data, inp.encoding, "data")
    args = {"exec_id": inp.exec_id, "eof": inp.eof}
    result, _ = await svc.request(inp.workspace_id, "exec.input", args, payload)
    return InputResult(exec_id=inp.exec_id, accepted=int(result.get("accepted", len(payload))))


async def workspace_realtime_exec_cancel(svc: Service, inp: ExecCancel) -> ExecStatus:
    args = {"exec_id": inp.exec_id, "grace_seconds": inp.grace_seconds}
    result, _ = await svc.request(inp.workspace_id, "exec.cancel", args)
    if result.get("state") not in FINAL_STATES:
        # Answer with how it ended rather than "running": a process that obeys SIGTERM ends at
        # once, one that ignores it at the grace period's SIGKILL. Past the bound the reply says
        # what the agent says then, and the exec's `exit` event tells the rest.
        bound = min(inp.grace_seconds, _CANCEL_WAIT_MAX) + _CANCEL_SLACK
        result = await wait_ended(svc, inp.workspace_id, inp.exec_id, result, bound)
    return status_out(inp.exec_id, result)


async def wait_ended(
    svc: Service, workspace_id: str, exec_id: str, status: dict[str, Any], seconds: float
) -> dict[str, Any]:
    """Follows an exec's stream from `status` until its `exit` event (or `seconds` pass), then
    answers its status. Woken by the event itself, so it costs no polling."""
    cursor = int(status.get("last_seq") or 0)
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        page = await svc.read_events(
            workspace_id,
            exec_id,
            cursor,
            max_events=1000,
            max_bytes=_DRAIN_PAGE_BYTES,
            wait_seconds=min(remaining, MAX_WAIT_SECONDS),
        )
        if page.closed or any(e.get("type") == "exit" for e in page.events):
            break
        cursor = page.next_cursor
    result, _ = await svc.request(workspace_id, "exec.status", {"exec_id": exec_id})
    return result


async def workspace_realtime_exec_list(svc: Service, inp: ExecListInput) -> ExecListResult:
    result, _ = await svc.request(inp.workspace_id, "exec.list", {})
    return ExecListResult(execs=[status_out("", s) for s in result.get("execs") or []])


async def wait_final(svc: Service, workspace_id: str, exec_id: str) -> dict[str, Any]:
    """Polls an exec's status until it ends (for background bookkeeping, not for clients),
    with what it ran (`command`, `argv`, `steps`)."""
    delay = 0.2
    args = {"exec_id": exec_id, "command": True}
    while True:
        status, _ = await svc.request(workspace_id, "exec.status", args)
        if status.get("state") in FINAL_STATES:
            return status
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 2.0)
