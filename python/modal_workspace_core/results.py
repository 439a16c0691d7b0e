"""The outputs of every operation: one model each, shared by REST, MCP and the Python API.

Fields that come from the agent are typed where the protocol fixes them and otherwise kept
(`extra="allow"`), so a newer agent's additions reach clients without a gateway release.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field


def _timestamp(value: Any) -> Any:
    # The agent may report epoch seconds; clients get one format, RFC 3339 in UTC.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC).isoformat().replace("+00:00", "Z")
    return value


Timestamp = Annotated[str | None, BeforeValidator(_timestamp)]


class Output(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorBody(BaseModel):
    code: str = Field(description="invalid_argument, not_found, conflict, permission, ...")
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class Workspace(Output):
    workspace_id: str
    driver: str
    root: str = Field(description="The workspace root as commands see it.")
    created_at: str
    tags: dict[str, str]
    state: Literal["running", "stopped", "terminated"]
    resources: dict[str, Any] = {}
    block_network: bool = False


class WorkspaceListResult(Output):
    workspaces: list[Workspace]


class TerminateResult(Output):
    workspace_id: str
    terminated: bool


class ExecStatus(Open):
    exec_id: str
    state: str = Field(
        description="starting, running, finished, cancelled, failed, timed_out, lost"
    )
    pid: int | None = None
    returncode: int | None = None
    signal: int | str | None = None
    error: str | None = None
    created_at: Timestamp = None
    started_at: Timestamp = None
    ended_at: Timestamp = None
    last_seq: int | None = None
    pty: bool | dict[str, Any] | None = None


class ExecListResult(Output):
    execs: list[ExecStatus]


class ExecResult(Output):
    exec_id: str
    state: str
    returncode: int | None
    stdout: str
    stderr: str
    stdout_truncated: bool = Field(description="Output was cut: head and tail are kept.")
    stderr_truncated: bool
    stdout_bytes: int = Field(description="Bytes the command wrote to stdout in total.")
    stderr_bytes: int
    timed_out: bool


def _unset(value: Any) -> bool:
    return value is None


class Event(Open):
    """One event of a stream. It carries `data` or `data_b64` (or neither) as the agent wrote
    it; an absent twin is left out rather than sent as null."""

    seq: int
    timestamp: str | float | None = Field(None, exclude_if=_unset)
    type: str = Field(description="stdout, stderr, status, exit, error, fs, progress, ...")
    data: str | None = Field(None, exclude_if=_unset)
    data_b64: str | None = Field(
        None, exclude_if=_unset, description="Output that is not UTF-8, base64-encoded."
    )


class EventPage(Output):
    events: list[Event]
    next_cursor: int = Field(description="Pass as cursor to the next call.")
    has_more: bool = Field(description="More events are ready now: call again at once.")
    done: bool = Field(description="The stream ended and its last event was delivered: stop.")
    state: str | None = Field(
        None,
        description="The stream's state as of this page: running (a watch: watching) while "
        "its events are output; from the exit event or the agent once it ends.",
    )
    returncode: int | None = Field(None, description="Set once the exec has ended.")
    first_seq: int = 0
    cursor_expired: bool = Field(False, description="Events after your cursor were dropped.")
    dropped_events: int = 0
    dropped_bytes: int = 0


class InputResult(Output):
    exec_id: str
    accepted: int


class RepoOperation(Output):
    exec_id: str = Field(description="Follow it with workspace_realtime_exec_events.")
    operation: Literal["clone", "fetch", "checkout"]
    repository: str | None = None
    destination: str
    ref: str | None = None
    state: str


class RepoStatusEntry(Output):
    path: str
    index: str = Field(description="Staged status letter (. = unchanged, ? = untracked).")
    worktree: str = Field(description="Working-tree status letter.")
    orig_path: str | None = None


class RepoStatus(Output):
    destination: str
    branch: str | None
    head: str | None
    upstream: str | None = None
    ahead: int = 0
    behind: int = 0
    clean: bool
    entries: list[RepoStatusEntry]
    truncated: bool = False


class RepoDiff(Output):
    destination: str
    cached: bool
    stat: bool
    diff: str
    truncated: bool
    bytes: int = Field(description="Size of the whole diff.")


class FileContent(Output):
    path: str
    content: str
    encoding: Literal["utf-8", "base64"]
    offset: int
    size: int = Field(description="The file's total size in bytes.")
    next_offset: int
    eof: bool


class FileWriteResult(Output):
    path: str
    size: int
    created: bool


class FileEditResult(Output):
    path: str
    replacements: int
    size: int | None = None


class FileEntry(Open):
    path: str
    kind: str = Field(description="file, dir, symlink or other")
    size: int | None = None
    mode: int | None = None
    mtime_ns: int | None = None
    symlink_target: str | None = None


class FileListResult(Output):
    path: str
    entries: list[FileEntry]
    truncated: bool = False


class FileRemoveResult(Output):
    path: str
    removed: int


class SearchHit(Open):
    path: str
    is_dir: bool = False
    line: int | None = None
    text: str | None = None


class FileSearchResult(Output):
    hits: list[SearchHit]
    truncated: bool = False
    files_visited: int | None = None


class WatchStatus(Open):
    watch_id: str
    state: str | None = None
    path: str | None = None
    created_at: Timestamp = None
    ended_at: Timestamp = None
    last_seq: int | None = None


class WatchListResult(Output):
    watches: list[WatchStatus]
