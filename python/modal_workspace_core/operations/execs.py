"""Commands: run to completion, and realtime execs followed by cursor pages, with stdin and
cancel.

Every exec is the agent's; the gateway picks exec ids (random, or derived from an idempotency
key) so that a repeated start answers the exec that already exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from .. import policy
from .._core import FINAL_STATES
from .exec_engine import exec_args, run_to_end
from .machinery.fields import (
    MAX_FILE_BYTES,
    MAX_OUTPUT_BYTES,
    Command,
    Env,
    ExecId,
    IdempotencyKey,
    Input,
    Open,
    Output,
    Timestamp,
    WorkspaceId,
    WorkspacePath,
    decode_input,
    derived_id,
)
from .machinery.fitting import KeepFirst, KeepHeadAndTail
from .machinery.limits import Bound
from .machinery.pages import (
    PAGE_BOUNDS,
    PAGE_LOOP_OF_STREAMS,
    EventsRead,
    PageResult,
    stream_page,
)
from .machinery.table import EX, READ, REWRITE, RUN, SETTING, WRITE, WS, Declarations

if TYPE_CHECKING:
    from ..runtime.service import Service

declare = Declarations()


# --- inputs --------------------------------------------------------------------------------------


class _Command(Input):
    """What every command takes: the shell text, where it runs and its extra environment."""

    workspace_id: WorkspaceId
    command: Command = Field(description="Run with bash -lc.")
    workdir: WorkspacePath | None = Field(None, description="Default /workspace.")
    env: Env = Field(default_factory=dict, description="Added to the workspace's.")


class ExecRun(_Command):
    stdin: str | None = Field(None, max_length=MAX_FILE_BYTES, description="Text to send.")
    timeout_seconds: float = Field(60, gt=0, le=3600, description="Killed after this long.")
    wait_seconds: float | None = Field(
        None,
        gt=0,
        le=3600,
        description="Then answer state running: it goes on (until timeout_seconds); follow "
        "exec_id. Null: until it ends.",
    )
    max_output_bytes: int = Field(
        32_000, ge=1024, le=MAX_OUTPUT_BYTES, description="Per stream; head and tail kept."
    )


# A terminal's bounds, as the agent checks them (it is the rule; these refuse early).
MAX_PTY_ROWS = 500
MAX_PTY_COLS = 1000
Rows = Annotated[int, Field(ge=1, le=MAX_PTY_ROWS)]
Cols = Annotated[int, Field(ge=1, le=MAX_PTY_COLS)]


class PtySize(Input):
    rows: Rows = Field(description="Lines.")
    cols: Cols = Field(description="Columns.")


class RealtimeExecStart(_Command):
    timeout_seconds: float | None = Field(
        None, gt=0, le=86_400, description="Killed after this long."
    )
    pty: PtySize | None = Field(None, description="A terminal of this size; output as stdout.")
    idempotency_key: IdempotencyKey | None = Field(None, description="The same key, the same exec.")


class ExecRef(Input):
    workspace_id: WorkspaceId
    exec_id: ExecId


class ExecEvents(EventsRead):
    workspace_id: WorkspaceId
    exec_id: ExecId


class ExecInput(Input):
    workspace_id: WorkspaceId
    exec_id: ExecId
    data: str = Field("", max_length=MAX_FILE_BYTES, description="Bytes for stdin (see encoding).")
    encoding: Literal["utf-8", "base64"] = Field(
        default="utf-8", description="How data is encoded."
    )
    eof: bool = Field(False, description="Close stdin after data.")


class ExecResize(Input):
    workspace_id: WorkspaceId
    exec_id: ExecId
    rows: Rows
    cols: Cols


class ExecCancel(Input):
    workspace_id: WorkspaceId
    exec_id: ExecId
    grace_seconds: float = Field(5, ge=0, le=60, description="SIGTERM, then SIGKILL after this.")


class ExecListInput(Input):
    workspace_id: WorkspaceId


# --- outputs -------------------------------------------------------------------------------------


class ExecStatus(Open):
    exec_id: str = Field(description="The exec's id.")
    state: str = Field(
        description="starting, running, finished, cancelled, failed, timed_out, lost"
    )
    pid: int | None = Field(
        default=None, description="Its process id in the workspace, while known."
    )
    returncode: int | None = Field(default=None, description="The exit code once it has ended.")
    signal: int | str | None = Field(
        default=None, description="The signal that ended it, if one did."
    )
    error: str | None = Field(
        default=None, description="Why it did not start or run, if it did not."
    )
    created_at: Timestamp = Field(
        default=None, description="When it was asked for (RFC 3339, UTC)."
    )
    started_at: Timestamp = Field(default=None, description="When its process started.")
    ended_at: Timestamp = Field(default=None, description="When it ended.")
    last_seq: int | None = Field(default=None, description="The seq of its newest event.")
    pty: bool | dict[str, Any] | None = Field(
        default=None, description="Its terminal's size now (rows, cols), if it has one."
    )


class ExecListResult(Output):
    execs: list[ExecStatus] = Field(description="The workspace's execs, newest first.")
    truncated: bool = Field(
        default=False, description="Only the first entries fitted the response."
    )

    gives_less = (KeepFirst("execs"),)


class ExecResult(Output):
    exec_id: str = Field(description="Follow it with workspace_realtime_exec_events if running.")
    state: str = Field(
        description="finished, failed, cancelled, timed_out; running (or starting) when the "
        "wait ended first: the command goes on, follow exec_id for the rest."
    )
    returncode: int | None = Field(
        description="The exit code; null until it ends, or if it never started (see error)."
    )
    error: str | None = Field(None, description="Why the command did not start or run.")
    stdout: str = Field(description="Standard output (UTF-8; head and tail when truncated).")
    stderr: str = Field(description="Standard error (UTF-8; head and tail when truncated).")
    stdout_truncated: bool = Field(description="Output was cut: head and tail are kept.")
    stderr_truncated: bool = Field(description="Standard error was cut: head and tail are kept.")
    stdout_bytes: int = Field(description="Bytes the command wrote to stdout in total.")
    stderr_bytes: int = Field(description="Bytes the command wrote to stderr in total.")
    timed_out: bool = Field(description="The command was killed at timeout_seconds.")

    # The streams share the room: a short one stays whole beside a long one, which keeps its
    # head (how it started) and its tail (how it ended).
    gives_less = (KeepHeadAndTail(("stdout", "stdout_truncated"), ("stderr", "stderr_truncated")),)


class ResizeResult(Output):
    exec_id: str = Field(description="The exec whose terminal was resized.")
    rows: int = Field(description="Its lines now.")
    cols: int = Field(description="Its columns now.")


class InputResult(Output):
    exec_id: str = Field(description="The exec the input went to.")
    accepted: int = Field(description="Bytes accepted for its stdin.")


# --- operations ----------------------------------------------------------------------------------


# How long a cancel waits for the exec to end: its grace period (at most this much) and slack
# for the SIGKILL and the exit to be recorded.
_CANCEL_WAIT_MAX = 20.0
_CANCEL_SLACK = 2.0


def derived_exec_id(workspace_id: str, key: str, secret: bytes) -> str:
    """The exec id an idempotency key names in one workspace: the same key, the same exec
    (see `derived_id`: nothing in the workspace can start an exec of its own under it)."""
    return derived_id("ex", workspace_id, key, secret)


def status_out(exec_id: str, result: dict[str, Any]) -> ExecStatus:
    return ExecStatus.model_validate({**result, "exec_id": result.get("exec_id") or exec_id})


@declare(
    method="POST",
    path=WS + "/exec",
    hints=RUN,
    summary="Run a shell command: its returncode, stdout and stderr.",
    limits="Output capped, head and tail kept (*_truncated); error: why it did not start. "
    "Running past wait_seconds: state running; follow exec_id with stream_events.",
    bounds={
        "actions": {"wait_seconds": Bound(30, 30), "max_output_bytes": Bound(40_000)},
        "mcp": {"wait_seconds": Bound(45, 45)},
    },
)
async def workspace_exec(svc: Service, inp: ExecRun) -> ExecResult:
    record = await svc.live_record(inp.workspace_id)
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


@declare(
    method="POST",
    path=WS + "/realtime-execs",
    hints=RUN,
    summary="Start a command in the background.",
    limits="Follow exec_id with stream_events.",
)
async def workspace_realtime_exec_start(svc: Service, inp: RealtimeExecStart) -> ExecStatus:
    record = await svc.live_record(inp.workspace_id)
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
        pty=inp.pty.model_dump() if inp.pty else None,
    )
    result, _ = await svc.request(inp.workspace_id, "exec.start", args)
    return status_out(exec_id, result)


@declare(
    method="GET",
    path=EX + "/events",
    hints=READ,
    summary="Read a realtime exec's output after a cursor (long-poll).",
    limits=PAGE_LOOP_OF_STREAMS,
    bounds=PAGE_BOUNDS,
    # GPT Actions takes 30 operations: there, stream_events reads every stream.
    in_actions=False,
)
async def workspace_realtime_exec_events(svc: Service, inp: ExecEvents) -> PageResult:
    return await stream_page(svc, inp.workspace_id, inp, inp.exec_id)


@declare(
    method="GET",
    path=EX,
    hints=READ,
    summary="Get a realtime exec's state: starting, running, then finished, cancelled, failed, "
    "timed_out or lost.",
)
async def workspace_realtime_exec_status(svc: Service, inp: ExecRef) -> ExecStatus:
    result, _ = await svc.request(inp.workspace_id, "exec.status", {"exec_id": inp.exec_id})
    return status_out(inp.exec_id, result)


@declare(
    method="POST",
    path=EX + "/input",
    hints=WRITE,
    summary="Send stdin to a realtime exec; eof closes it.",
)
async def workspace_realtime_exec_input(svc: Service, inp: ExecInput) -> InputResult:
    payload = decode_input(inp.data, inp.encoding, "data")
    args = {"exec_id": inp.exec_id, "eof": inp.eof}
    result, _ = await svc.request(inp.workspace_id, "exec.input", args, payload)
    return InputResult(exec_id=inp.exec_id, accepted=int(result.get("accepted", len(payload))))


@declare(
    method="POST",
    path=EX + "/resize",
    hints=SETTING,
    summary="Resize a realtime exec's terminal (started with pty): SIGWINCH to its programs.",
    limits="409 without a terminal or once ended.",
    # GPT Actions takes 30 operations, and a chat has no screen to fit.
    in_actions=False,
)
async def workspace_realtime_exec_resize(svc: Service, inp: ExecResize) -> ResizeResult:
    args = {"exec_id": inp.exec_id, "rows": inp.rows, "cols": inp.cols}
    result, _ = await svc.request(inp.workspace_id, "exec.resize", args)
    return ResizeResult.model_validate({"exec_id": inp.exec_id, **result})


@declare(
    method="POST",
    path=EX + "/cancel",
    hints=REWRITE,
    summary="Cancel a realtime exec: SIGTERM to its process group, SIGKILL after grace_seconds.",
    limits="Answers once it ended, within grace_seconds (up to 20) plus 2 s.",
)
async def workspace_realtime_exec_cancel(svc: Service, inp: ExecCancel) -> ExecStatus:
    args = {"exec_id": inp.exec_id, "grace_seconds": inp.grace_seconds}
    result, _ = await svc.request(inp.workspace_id, "exec.cancel", args)
    if result.get("state") not in FINAL_STATES:
        # Answer with how it ended rather than "running": a process that obeys SIGTERM ends at
        # once, one that ignores it at the grace period's SIGKILL. Past the bound the reply says
        # what the agent says then, and the exec's `exit` event tells the rest.
        bound = min(inp.grace_seconds, _CANCEL_WAIT_MAX) + _CANCEL_SLACK
        result = await svc.exec_ended(inp.workspace_id, inp.exec_id, within=bound)
    return status_out(inp.exec_id, result)


@declare(
    method="GET",
    path=WS + "/realtime-execs",
    hints=READ,
    summary="List the workspace's execs, newest first.",
    # GPT Actions takes 30 operations: a chat knows the execs it started by their ids.
    in_actions=False,
)
async def workspace_realtime_exec_list(svc: Service, inp: ExecListInput) -> ExecListResult:
    result, _ = await svc.request(inp.workspace_id, "exec.list", {})
    return ExecListResult(execs=[status_out("", s) for s in result.get("execs") or []])
