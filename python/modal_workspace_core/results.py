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
    message: str = Field(description="What went wrong and, where it helps, what to do.")
    field: str | None = Field(default=None, description="The input field at fault, when one is.")


class ErrorResponse(BaseModel):
    error: ErrorBody = Field(description="The error.")


class Workspace(Output):
    workspace_id: str = Field(description="The workspace's id.")
    driver: str = Field(description="Where it runs: local or modal.")
    root: str = Field(description="The workspace root as commands see it.")
    created_at: str = Field(description="When it was created (RFC 3339, UTC).")
    tags: dict[str, str] = Field(description="Your tags and the managed ones.")
    state: Literal["running", "stopped", "terminated"] = Field(
        description="running, stopped or terminated."
    )
    resources: dict[str, Any] = Field(default={}, description="The resources it was created with.")
    block_network: bool = Field(default=False, description="It has no network access.")


class WorkspaceListResult(Output):
    workspaces: list[Workspace] = Field(description="The running workspaces, newest first.")
    truncated: bool = Field(
        default=False, description="Only the first entries fitted the response."
    )


class TerminateResult(Output):
    workspace_id: str = Field(description="The workspace terminated.")
    terminated: bool = Field(description="It is terminated now.")


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
        default=None, description="Its pseudo-terminal (rows, cols), if it runs on one."
    )


class ExecListResult(Output):
    execs: list[ExecStatus] = Field(description="The workspace's execs, newest first.")
    truncated: bool = Field(
        default=False, description="Only the first entries fitted the response."
    )


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


def _unset(value: Any) -> bool:
    return value is None


class Event(Open):
    """One event of a stream. It carries `data` or `data_b64` (or neither) as the agent wrote
    it; an absent twin is left out rather than sent as null."""

    seq: int = Field(description="The event's number in its stream (1, 2, …); cursors count these.")
    timestamp: str | float | None = Field(
        None, exclude_if=_unset, description="When the event happened (RFC 3339, UTC)."
    )
    type: str = Field(description="stdout, stderr, status, exit, error, fs, progress, ...")
    data: str | None = Field(None, exclude_if=_unset, description="Output or detail as UTF-8 text.")
    data_b64: str | None = Field(
        None, exclude_if=_unset, description="Output that is not UTF-8, base64-encoded."
    )


class EventPage(Output):
    events: list[Event] = Field(
        description="The events after your cursor, oldest first (may be empty)."
    )
    next_cursor: int = Field(description="Pass as cursor to the next call.")
    has_more: bool = Field(description="More events are ready now: call again at once.")
    done: bool = Field(description="The stream ended and its last event was delivered: stop.")
    state: str | None = Field(
        None,
        description="The stream's state as of this page: running (a watch: watching) while "
        "its events are output; from the exit event or the agent once it ends.",
    )
    returncode: int | None = Field(None, description="Set once the exec has ended.")
    first_seq: int = Field(default=0, description="The oldest event the stream still holds.")
    cursor_expired: bool = Field(False, description="Events after your cursor were dropped.")
    dropped_events: int = Field(
        default=0, description="Events after your cursor that were dropped (cursor_expired)."
    )
    dropped_bytes: int = Field(default=0, description="Bytes of output in the dropped events.")


class InputResult(Output):
    exec_id: str = Field(description="The exec the input went to.")
    accepted: int = Field(description="Bytes accepted for its stdin.")


class RepoOperation(Output):
    exec_id: str = Field(description="Follow it with workspace_realtime_exec_events.")
    operation: Literal["clone", "fetch", "checkout"] = Field(
        description="clone, fetch or checkout."
    )
    repository: str | None = Field(default=None, description="The canonical repository URL.")
    destination: str = Field(description="The repository's directory.")
    ref: str | None = Field(default=None, description="The branch, tag or commit asked for.")
    state: str = Field(description="The exec's state when it was started.")


class RepoStatusEntry(Output):
    path: str = Field(description="The path, relative to the repository.")
    index: str = Field(description="Staged status letter (. = unchanged, ? = untracked).")
    worktree: str = Field(description="Working-tree status letter.")
    orig_path: str | None = Field(
        default=None, description="The path it was renamed or copied from."
    )


class RepoStatus(Output):
    destination: str = Field(description="The repository's directory.")
    branch: str | None = Field(description="The current branch (null when detached).")
    head: str | None = Field(description="The commit HEAD points at.")
    upstream: str | None = Field(default=None, description="The upstream branch, if one is set.")
    ahead: int = Field(default=0, description="Commits ahead of upstream.")
    behind: int = Field(default=0, description="Commits behind upstream.")
    clean: bool = Field(description="Nothing is changed or untracked.")
    entries: list[RepoStatusEntry] = Field(description="Changed and untracked paths.")
    truncated: bool = Field(default=False, description="More paths changed than were returned.")


class RepoDiff(Output):
    destination: str = Field(description="The repository's directory.")
    cached: bool = Field(description="Staged changes rather than the working tree.")
    stat: bool = Field(description="A diffstat rather than the patch.")
    diff: str = Field(description="The diff text (its start when truncated).")
    truncated: bool = Field(description="The diff was cut to fit.")
    bytes: int = Field(description="Size of the whole diff.")


class FileContent(Output):
    path: str = Field(description="The file, under the workspace root.")
    content: str = Field(
        description="The bytes read: text, or base64 when the file is not UTF-8 text."
    )
    encoding: Literal["utf-8", "base64"] = Field(
        description="How content is written: utf-8 or base64."
    )
    offset: int = Field(description="Where this read started, in bytes.")
    size: int = Field(description="The file's total size in bytes.")
    next_offset: int = Field(description="Pass as offset to read on.")
    eof: bool = Field(description="The read reached the end of the file.")


class FileWriteResult(Output):
    path: str = Field(description="The file written.")
    size: int = Field(description="Its size in bytes.")
    created: bool = Field(description="The file did not exist before.")


class FileEditResult(Output):
    path: str = Field(description="The file edited.")
    replacements: int = Field(description="How many occurrences were replaced.")
    size: int | None = Field(default=None, description="The file's size afterwards, in bytes.")


class FileEntry(Open):
    path: str = Field(description="The entry, under the workspace root.")
    kind: str = Field(description="file, dir, symlink or other")
    size: int | None = Field(default=None, description="Size in bytes (files).")
    mode: int | None = Field(default=None, description="Unix permission bits.")
    mtime_ns: int | None = Field(
        default=None, description="Last modification, nanoseconds since the epoch."
    )
    symlink_target: str | None = Field(default=None, description="Where a symlink points.")


class FileListResult(Output):
    path: str = Field(description="The directory listed.")
    entries: list[FileEntry] = Field(description="Its entries (to depth), sorted by path.")
    truncated: bool = Field(default=False, description="More entries exist than were returned.")


class FileRemoveResult(Output):
    path: str = Field(description="What was removed.")
    removed: int = Field(description="How many files and directories were removed.")


class SearchHit(Open):
    path: str = Field(description="The file (or, by name, the directory) that matched.")
    is_dir: bool = Field(default=False, description="The hit is a directory.")
    line: int | None = Field(
        default=None, description="The matching line's number (content search)."
    )
    text: str | None = Field(default=None, description="The matching line (content search).")


class FileSearchResult(Output):
    hits: list[SearchHit] = Field(description="The matches.")
    truncated: bool = Field(default=False, description="More matches exist than were returned.")
    files_visited: int | None = Field(default=None, description="How many files were searched.")


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
