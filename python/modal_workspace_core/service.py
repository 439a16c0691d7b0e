"""The one table of operations: each declared once, with its input and output models, limits,
REST route, MCP annotations and place in the GPT Actions schema.

REST routes (`api.py`), MCP tools (`mcp.py`) and the Python API (`client.py`) are generated from
`OPERATIONS`; none of them is written by hand per operation.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from . import models as m
from . import ops_execs as ex
from . import ops_files as fs
from . import ops_repo as repo
from . import ops_workspaces as wsp
from . import results as r
from .errors import InvalidArgumentError, WorkspaceError, validation_error
from .git import pending as repo_pending
from .operations.pages import PageResult
from .path_view import shown
from .service_core import ANSWER_BY, Service, translate_error
from .surfaces.limits import (
    ACTIONS_MAX_CHARS,
    ACTIONS_SECONDS,
    Bound,
    Bounds,
    Surface,
    surface_model,
)
from .surfaces.rest.fit import fit_json

__all__ = [
    "OPERATIONS",
    "Hints",
    "Operation",
    "Service",
    "call",
    "operation",
    "parse_input",
    "parse_request",
]

Method = Literal["GET", "POST", "PUT", "DELETE"]
# A handler answers its output model, or a page whose JSON REST sends as it is (`PageResult`).
Handler = Callable[[Service, Any], Awaitable[BaseModel | PageResult]]


@dataclass(frozen=True)
class Hints:
    """MCP tool annotations; every tool sets all four."""

    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool


READ = Hints(read_only=True, destructive=False, idempotent=True, open_world=False)
WRITE = Hints(read_only=False, destructive=False, idempotent=False, open_world=False)
REWRITE = Hints(read_only=False, destructive=True, idempotent=True, open_world=False)
DESTROY = Hints(read_only=False, destructive=True, idempotent=False, open_world=False)
RUN = Hints(read_only=False, destructive=True, idempotent=False, open_world=True)
NETWORK = Hints(read_only=False, destructive=False, idempotent=False, open_world=True)


@dataclass(frozen=True)
class Operation:
    name: str
    summary: str  # one sentence, also the MCP tool's description and the REST summary
    method: Method
    path: str  # under /api
    input: type[m.Input]
    output: type[BaseModel]
    hints: Hints
    handler: Handler
    limits: str = ""  # appended to the description: the bounds a caller must know
    in_actions: bool = True
    # Per surface, the most (and the default) a numeric field takes there (see `surfaces`).
    bounds: Bounds = field(default_factory=dict)

    def input_for(self, surface: Surface) -> type[m.Input]:
        """The input model as `surface` validates it: the operation's, with its bounds there."""
        return surface_model(self.input, self.input.__name__, self.bounds.get(surface, {}))

    @property
    def path_params(self) -> tuple[str, ...]:
        return tuple(re.findall(r"{(\w+)}", self.path))

    @property
    def description(self) -> str:
        return f"{self.summary} {self.limits}".strip()


WS = "/workspaces/{workspace_id}"
EX = WS + "/realtime-execs/{exec_id}"
FW = WS + "/file-watches/{watch_id}"
_PAGE = (
    "Loop: cursor=0, then each page's next_cursor, until done is true. Use wait_seconds=25 (it "
    "waits for new events): an empty page means nothing new yet, call again; has_more: call "
    "again now; cursor_expired: older events were dropped."
)
# GPT Actions' budget for a page: its JSON (the events as encoded) stays well under the limit.
_PAGE_BOUNDS: Bounds = {"actions": {"max_bytes": Bound(64_000)}}

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        name="workspace_create",
        method="POST",
        path="/workspaces",
        input=m.WorkspaceCreate,
        output=r.Workspace,
        hints=WRITE,
        handler=wsp.workspace_create,
        summary=(
            "Create a workspace: a durable machine with its root at /workspace. The same "
            "idempotency_key returns the same workspace."
        ),
        limits=(
            "Managed tags (managed-by, workspace-id, workspace-root, repo-*) cannot be set; secrets"
            " and volumes must be allowlisted."
        ),
    ),
    Operation(
        name="workspace_list",
        method="GET",
        path="/workspaces",
        input=m.WorkspaceList,
        output=r.WorkspaceListResult,
        hints=READ,
        handler=wsp.workspace_list,
        summary="List the workspaces.",
    ),
    Operation(
        name="workspace_get",
        method="GET",
        path=WS,
        input=m.WorkspaceRef,
        output=r.Workspace,
        hints=READ,
        handler=wsp.workspace_get,
        summary="Get one workspace: its state, root, tags and resources.",
    ),
    Operation(
        name="workspace_terminate",
        method="DELETE",
        path=WS,
        input=m.WorkspaceRef,
        output=r.TerminateResult,
        hints=DESTROY,
        handler=wsp.workspace_terminate,
        summary="Terminate a workspace and everything running in it.",
    ),
    Operation(
        name="workspace_exec",
        method="POST",
        path=WS + "/exec",
        input=m.ExecRun,
        output=r.ExecResult,
        hints=RUN,
        handler=ex.workspace_exec,
        summary="Run a shell command to completion and return its exit code and output.",
        limits=(
            "Waits at most wait_seconds (30 s here), then answers state running with exec_id: "
            "the command goes on, follow its events. Output capped (head and tail, flagged); "
            "error says why a command did not start."
        ),
        bounds={
            "actions": {"wait_seconds": Bound(30, 30), "max_output_bytes": Bound(40_000)},
            "mcp": {"wait_seconds": Bound(45, 45)},
        },
    ),
    Operation(
        name="workspace_realtime_exec_start",
        method="POST",
        path=WS + "/realtime-execs",
        input=m.RealtimeExecStart,
        output=r.ExecStatus,
        hints=RUN,
        handler=ex.workspace_realtime_exec_start,
        summary=(
            "Start a command in the background; follow its output with "
            "workspace_realtime_exec_events."
        ),
        limits="The same idempotency_key returns the exec it started.",
    ),
    Operation(
        name="workspace_realtime_exec_events",
        method="GET",
        path=EX + "/events",
        input=m.ExecEvents,
        output=r.EventPage,
        hints=READ,
        handler=ex.workspace_realtime_exec_events,
        summary="Read a realtime exec's output events after a cursor (long-poll).",
        limits=_PAGE,
        bounds=_PAGE_BOUNDS,
    ),
    Operation(
        name="workspace_realtime_exec_status",
        method="GET",
        path=EX,
        input=m.ExecRef,
        output=r.ExecStatus,
        hints=READ,
        handler=ex.workspace_realtime_exec_status,
        summary="Get a realtime exec's state and exit code.",
    ),
    Operation(
        name="workspace_realtime_exec_input",
        method="POST",
        path=EX + "/input",
        input=m.ExecInput,
        output=r.InputResult,
        hints=WRITE,
        handler=ex.workspace_realtime_exec_input,
        summary="Send stdin to a realtime exec; eof closes it.",
    ),
    Operation(
        name="workspace_realtime_exec_cancel",
        method="POST",
        path=EX + "/cancel",
        input=m.ExecCancel,
        output=r.ExecStatus,
        hints=REWRITE,
        handler=ex.workspace_realtime_exec_cancel,
        summary=(
            "Cancel a realtime exec: SIGTERM to its process group, SIGKILL after grace_seconds."
        ),
        limits=(
            "Answers once the exec has ended (state cancelled), waiting at most grace_seconds "
            "(up to 20) plus 2 s; after that its exit event tells how it ended."
        ),
    ),
    Operation(
        name="workspace_realtime_exec_list",
        method="GET",
        path=WS + "/realtime-execs",
        input=m.ExecListInput,
        output=r.ExecListResult,
        hints=READ,
        handler=ex.workspace_realtime_exec_list,
        summary="List the workspace's execs, newest first.",
    ),
    Operation(
        name="repo_clone",
        method="POST",
        path=WS + "/repo/clone",
        input=m.RepoClone,
        output=r.RepoOperation,
        hints=NETWORK,
        handler=repo.repo_clone,
        summary=(
            "Clone a GitHub repository into the workspace as a realtime exec (git progress in its "
            "events)."
        ),
        limits=(
            "Follow exec_id with workspace_realtime_exec_events; repo tags are recorded after "
            "success."
        ),
    ),
    Operation(
        name="repo_fetch",
        method="POST",
        path=WS + "/repo/fetch",
        input=m.RepoFetch,
        output=r.RepoOperation,
        hints=NETWORK,
        handler=repo.repo_fetch,
        summary="Fetch from origin in a cloned repository as a realtime exec.",
    ),
    Operation(
        name="repo_checkout",
        method="POST",
        path=WS + "/repo/checkout",
        input=m.RepoCheckout,
        output=r.RepoOperation,
        hints=DESTROY,
        handler=repo.repo_checkout,
        summary="Check out a branch, tag or commit in a cloned repository as a realtime exec.",
    ),
    Operation(
        name="repo_status",
        method="GET",
        path=WS + "/repo/status",
        input=m.RepoStatusInput,
        output=r.RepoStatus,
        hints=READ,
        handler=repo.repo_status,
        summary="Show a repository's branch, upstream, ahead/behind and changed files.",
    ),
    Operation(
        name="repo_diff",
        method="GET",
        path=WS + "/repo/diff",
        input=m.RepoDiffInput,
        output=r.RepoDiff,
        hints=READ,
        handler=repo.repo_diff,
        summary=(
            "Show a repository's diff: working tree (untracked files as new) or staged with cached."
        ),
        limits="Output capped by max_bytes (truncated flag).",
        bounds={"actions": {"max_bytes": Bound(90_000)}},
    ),
    Operation(
        name="file_read",
        method="GET",
        path=WS + "/files/content",
        input=m.FileRead,
        output=r.FileContent,
        hints=READ,
        handler=fs.file_read,
        summary="Read a file (UTF-8 text, or base64 for binary) from an offset.",
        limits="At most max_bytes per call; continue from next_offset until eof.",
        bounds={"actions": {"max_bytes": Bound(90_000)}},
    ),
    Operation(
        name="file_write",
        method="PUT",
        path=WS + "/files/content",
        input=m.FileWrite,
        output=r.FileWriteResult,
        hints=REWRITE,
        handler=fs.file_write,
        summary="Write a whole file atomically, creating parent directories.",
    ),
    Operation(
        name="file_edit",
        method="POST",
        path=WS + "/files/edit",
        input=m.FileEdit,
        output=r.FileEditResult,
        hints=WRITE,
        handler=fs.file_edit,
        summary=(
            "Replace exact text in a file (one match unless expected_replacements says otherwise)."
        ),
    ),
    Operation(
        name="file_list",
        method="GET",
        path=WS + "/files",
        input=m.FileList,
        output=r.FileListResult,
        hints=READ,
        handler=fs.file_list,
        summary="List a directory's entries, optionally several levels deep.",
    ),
    Operation(
        name="file_remove",
        method="DELETE",
        path=WS + "/files",
        input=m.FileRemove,
        output=r.FileRemoveResult,
        hints=DESTROY,
        handler=fs.file_remove,
        summary="Remove a file, a symlink (not its target), or a directory with recursive.",
    ),
    Operation(
        name="file_search",
        method="GET",
        path=WS + "/files/search",
        input=m.FileSearch,
        output=r.FileSearchResult,
        hints=READ,
        handler=fs.file_search,
        summary="Search file contents by regex, or file names by glob; honours .gitignore.",
    ),
    Operation(
        name="workspace_file_watch_start",
        method="POST",
        path=WS + "/file-watches",
        input=m.WatchStart,
        output=r.WatchStatus,
        hints=WRITE,
        handler=fs.workspace_file_watch_start,
        summary="Watch a directory tree for created, modified, removed and renamed files.",
        limits="Read its events with workspace_file_watch_events.",
    ),
    Operation(
        name="workspace_file_watch_events",
        method="GET",
        path=FW + "/events",
        input=m.WatchEvents,
        output=r.EventPage,
        hints=READ,
        handler=fs.workspace_file_watch_events,
        summary="Read a file watch's events after a cursor (long-poll).",
        limits=_PAGE,
        bounds=_PAGE_BOUNDS,
    ),
    Operation(
        name="workspace_file_watch_status",
        method="GET",
        path=FW,
        input=m.WatchRef,
        output=r.WatchStatus,
        hints=READ,
        handler=fs.workspace_file_watch_status,
        summary="Get a file watch's state.",
    ),
    Operation(
        name="workspace_file_watch_list",
        method="GET",
        path=WS + "/file-watches",
        input=m.WatchListInput,
        output=r.WatchListResult,
        hints=READ,
        handler=fs.workspace_file_watch_list,
        summary="List the workspace's file watches.",
    ),
    Operation(
        name="workspace_file_watch_cancel",
        method="DELETE",
        path=FW,
        input=m.WatchRef,
        output=r.WatchStatus,
        hints=REWRITE,
        handler=fs.workspace_file_watch_cancel,
        summary="Stop a file watch.",
    ),
)

_BY_NAME = {op.name: op for op in OPERATIONS}

Service.on_first_connect = (repo_pending.resume_pending,)


def operation(name: str) -> Operation:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise InvalidArgumentError(f"unknown operation {name[:64]!r}") from None


def parse_input(
    op: Operation,
    args: Mapping[str, Any],
    surface: Surface = "python",
    root: str = m.WORKSPACE_ROOT,
) -> m.Input:
    """A client's arguments as the operation's input; paths may also name the workspace's
    `root` (see `path_view`)."""
    try:
        return op.input_for(surface).model_validate(dict(args), context={"root": root})
    except ValidationError as exc:
        raise validation_error(exc) from None


async def parse_request(
    service: Service, op: Operation, args: Mapping[str, Any], surface: Surface = "python"
) -> m.Input:
    """`parse_input`, knowing the root of the workspace the arguments name. Only a path that
    `/workspace` does not take, on a driver whose roots vary, costs a look at the workspace's
    record (by its id; the path never reaches the driver): every other refusal comes before the
    driver is asked anything."""
    try:
        return parse_input(op, args, surface)
    except InvalidArgumentError as err:
        if (err.field or "").partition(".")[0] not in m.path_fields(op.input):
            raise
        root = await service.root(args.get("workspace_id"))
        if root == m.WORKSPACE_ROOT:
            raise
    return parse_input(op, args, surface, root)


async def call(service: Service, op: Operation, inp: m.Input) -> BaseModel:
    """Runs a validated input through its handler; any failure becomes a `WorkspaceError`."""
    result = await _run(service, op, inp)
    return result.model() if isinstance(result, PageResult) else result


# What a GPT Actions response may take, with room to spare under its limit.
ACTIONS_RESPONSE_CHARS = ACTIONS_MAX_CHARS - 5_000
# And the time it may take, with room for the network and the client under its limit.
ACTIONS_MARGIN_SECONDS = 5.0


async def call_json(service: Service, op: Operation, inp: m.Input) -> str:
    """`call`, answered as the JSON of its output (REST's body, for GPT Actions): fitted to
    `ACTIONS_RESPONSE_CHARS`. A page of events is written around the agent's own JSON of the
    events, without a model of each; its `max_bytes` bound already keeps it within."""
    # Agent requests end in time for the answer to reach GPT Actions before it gives up.
    token = ANSWER_BY.set(time.monotonic() + ACTIONS_SECONDS - ACTIONS_MARGIN_SECONDS)
    try:
        result = await _run(service, op, inp)
    finally:
        ANSWER_BY.reset(token)
    if isinstance(result, PageResult):
        return result.to_json()
    return fit_json(result, ACTIONS_RESPONSE_CHARS)


def _output(op: Operation, result: BaseModel) -> BaseModel:
    return result if isinstance(result, op.output) else op.output.model_validate(result)


async def _run(service: Service, op: Operation, inp: m.Input) -> BaseModel | PageResult:
    try:
        result = await op.handler(service, inp)
    except WorkspaceError:
        raise
    except Exception as exc:
        raise translate_error(exc) from None
    if isinstance(result, PageResult):
        return result
    return shown(_output(op, result), await service.root(getattr(inp, "workspace_id", None)))
