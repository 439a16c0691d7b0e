"""File watches: start one on a directory, follow its events with a cursor, list and stop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from .. import policy
from .machinery.fields import Input, Open, Output, Timestamp, WatchId, WorkspaceId, WorkspacePath
from .machinery.fitting import KeepFirst
from .machinery.pages import (
    PAGE_BOUNDS,
    PAGE_LOOP_OF_STREAMS,
    EventsRead,
    PageResult,
    stream_page,
)
from .machinery.table import FW, READ, REWRITE, WRITE, WS, Declarations

if TYPE_CHECKING:
    from ..runtime.service import Service

declare = Declarations()


# --- inputs --------------------------------------------------------------------------------------


class WatchStart(Input):
    workspace_id: WorkspaceId
    path: WorkspacePath = "."
    kinds: list[Literal["create", "modify", "remove", "rename"]] | None = Field(
        default=None,
        description="Default all: create, modify, remove, rename.",
    )
    timeout_seconds: float | None = Field(None, gt=0, le=86_400, description="Then it ends.")


class WatchRef(Input):
    workspace_id: WorkspaceId
    watch_id: WatchId


class WatchEvents(EventsRead):
    workspace_id: WorkspaceId
    watch_id: WatchId


class WatchListInput(Input):
    workspace_id: WorkspaceId


# --- outputs -------------------------------------------------------------------------------------


class WatchStatus(Open):
    watch_id: str = Field(description="The watch's id.")
    state: str | None = Field(default=None, description="watching, cancelled, timed_out or failed.")
    path: str | None = Field(default=None, description="The directory watched.")
    created_at: Timestamp = Field(default=None, description="When it started.")
    ended_at: Timestamp = Field(default=None, description="When it ended.")
    last_seq: int | None = Field(default=None, description="The seq of its newest event.")


class WatchListResult(Output):
    watches: list[WatchStatus] = Field(description="The workspace's file watches.")
    truncated: bool = Field(
        default=False, description="Only the first entries fitted the response."
    )

    gives_less = (KeepFirst("watches"),)


# --- operations ----------------------------------------------------------------------------------


def _watch_out(watch_id: str, status: dict[str, Any]) -> WatchStatus:
    return WatchStatus.model_validate({**status, "watch_id": status.get("watch_id") or watch_id})


@declare(
    method="POST",
    path=WS + "/file-watches",
    hints=WRITE,
    summary="Watch a directory tree for file changes.",
    limits="Read its events with workspace_file_watch_events.",
    # GPT Actions takes 30 operations, and a chat follows no live stream of changes: it sees
    # them with repo_status and file_list. The family stays in MCP and the Python API.
    in_actions=False,
)
async def workspace_file_watch_start(svc: Service, inp: WatchStart) -> WatchStatus:
    watch_id = policy.new_id("fw")
    args: dict[str, Any] = {"watch_id": watch_id, "path": inp.path}
    if inp.kinds is not None:
        args["kinds"] = inp.kinds
    if inp.timeout_seconds is not None:
        args["timeout_seconds"] = inp.timeout_seconds
    result, _ = await svc.request(inp.workspace_id, "watch.start", args)
    return _watch_out(watch_id, result)


@declare(
    method="GET",
    path=FW + "/events",
    hints=READ,
    summary="Read a file watch's events after a cursor (long-poll).",
    limits=PAGE_LOOP_OF_STREAMS,
    bounds=PAGE_BOUNDS,
    # GPT Actions takes 30 operations: there, stream_events reads every stream.
    in_actions=False,
)
async def workspace_file_watch_events(svc: Service, inp: WatchEvents) -> PageResult:
    return await stream_page(svc, inp.workspace_id, inp, inp.watch_id)


# Not for GPT Actions (30 operations at most): the watch list and every page say the state.
@declare(
    method="GET",
    path=FW,
    hints=READ,
    summary="Get a file watch's state: watching, then cancelled, timed_out or failed.",
    in_actions=False,
)
async def workspace_file_watch_status(svc: Service, inp: WatchRef) -> WatchStatus:
    result, _ = await svc.request(inp.workspace_id, "watch.status", {"watch_id": inp.watch_id})
    return _watch_out(inp.watch_id, result)


@declare(
    method="GET",
    path=WS + "/file-watches",
    hints=READ,
    summary="List the workspace's file watches.",
    in_actions=False,
)
async def workspace_file_watch_list(svc: Service, inp: WatchListInput) -> WatchListResult:
    result, _ = await svc.request(inp.workspace_id, "watch.list", {})
    return WatchListResult(watches=[_watch_out("", w) for w in result.get("watches") or []])


@declare(method="DELETE", path=FW, hints=REWRITE, summary="Stop a file watch.", in_actions=False)
async def workspace_file_watch_cancel(svc: Service, inp: WatchRef) -> WatchStatus:
    result, _ = await svc.request(inp.workspace_id, "watch.cancel", {"watch_id": inp.watch_id})
    return _watch_out(inp.watch_id, result)
