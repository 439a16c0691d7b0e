"""Files: read, write, edit, list, remove and search, on the agent's contained file
operations.

Paths arrive validated and normalised under `/workspace` and go to the agent as they are (it
resolves them beneath its root race-free, refusing escapes through symlinks); its results name
paths under `/workspace` too (shown under the workspace's own root by `path_view`).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ..errors import ConflictError, InvalidArgumentError, NotFoundError, naming
from ..policy import WORKSPACE_ROOT
from .machinery.fields import (
    MAX_FILE_BYTES,
    Input,
    Open,
    Output,
    WorkspaceId,
    WorkspacePath,
    decode_input,
)
from .machinery.fitting import KeepFirst, KeepReadStart
from .machinery.limits import Bound
from .machinery.table import DESTROY, READ, REWRITE, WRITE, WS, Declarations

if TYPE_CHECKING:
    from ..runtime.service import Service

declare = Declarations()


# --- inputs --------------------------------------------------------------------------------------


class FileRead(Input):
    workspace_id: WorkspaceId
    path: WorkspacePath
    offset: int = Field(0, ge=0, description="Where to start, in bytes.")
    max_bytes: int = Field(
        48_000,
        ge=1,
        le=MAX_FILE_BYTES,
        description="Most to read; fewer may come back.",
    )


class FileWrite(Input):
    workspace_id: WorkspaceId
    path: WorkspacePath
    content: str = Field(max_length=2 * MAX_FILE_BYTES, description="The whole file.")
    encoding: Literal["utf-8", "base64"] = Field(
        default="utf-8", description="How content is encoded."
    )
    create_parents: bool = Field(default=True, description="Create missing directories.")


class FileEdit(Input):
    workspace_id: WorkspaceId
    path: WorkspacePath
    old: str = Field(min_length=1, max_length=MAX_FILE_BYTES, description="Exact text.")
    new: str = Field(max_length=MAX_FILE_BYTES, description="Its replacement.")
    expected_replacements: int | None = Field(
        None, ge=1, description="Fail unless this many match (default 1)."
    )


class FileList(Input):
    workspace_id: WorkspaceId
    path: WorkspacePath = "."
    depth: int = Field(1, ge=1, le=32, description="Levels; 1: the entries.")
    max_entries: int = Field(1000, ge=1, le=10_000, description="To return.")


class FileRemove(Input):
    workspace_id: WorkspaceId
    path: WorkspacePath
    recursive: bool = Field(default=False, description="Remove a directory and all under it.")


class FileSearch(Input):
    workspace_id: WorkspaceId
    pattern: str = Field(
        min_length=1,
        max_length=1024,
        description="A regex (content) or a glob (name).",
    )
    mode: Literal["content", "name"] = Field("content", description="Search file text, or paths.")
    path: WorkspacePath = "."
    glob: str | None = Field(None, max_length=1024, description="Only files matching it.")
    case_insensitive: bool = Field(default=False, description="Ignore case.")
    max_results: int = Field(200, ge=1, le=10_000, description="To return.")


# --- outputs -------------------------------------------------------------------------------------


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

    # A shorter read, never a cut one: the caller goes on from next_offset.
    gives_less = (KeepReadStart(),)


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

    gives_less = (KeepFirst("entries"),)


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

    gives_less = (KeepFirst("hits"),)


# --- operations ----------------------------------------------------------------------------------


def decode_text(data: bytes, complete: bool) -> tuple[str, str, int]:
    """(content, encoding, bytes used): UTF-8 when it is, else base64. A read that stopped in
    the middle of a character returns the whole characters and lets the next read continue."""
    try:
        return data.decode(), "utf-8", len(data)
    except UnicodeDecodeError as exc:
        cut = len(data) - exc.start
        if not complete and exc.reason == "unexpected end of data" and 0 < cut < 4:
            return data[: exc.start].decode(), "utf-8", exc.start
    return base64.b64encode(data).decode(), "base64", len(data)


@declare(
    method="GET",
    path=WS + "/files/content",
    hints=READ,
    summary="Read a file (text, or base64 if binary) from an offset.",
    limits="Go on from next_offset until eof.",
    bounds={"actions": {"max_bytes": Bound(90_000)}},
)
async def file_read(svc: Service, inp: FileRead) -> FileContent:
    args = {"path": inp.path, "offset": inp.offset, "max_len": inp.max_bytes}
    with naming("path", NotFoundError, ConflictError):
        meta, data = await svc.request(inp.workspace_id, "file.read", args)
    size = int(meta.get("total_size", meta.get("size", inp.offset + len(data))))
    eof = bool(meta.get("eof", inp.offset + len(data) >= size))
    content, encoding, used = decode_text(data, complete=eof)
    return FileContent(
        path=inp.path,
        content=content,
        encoding=encoding,  # type: ignore[arg-type]
        offset=inp.offset,
        size=size,
        next_offset=inp.offset + used,
        eof=eof and used == len(data),
    )


@declare(
    method="PUT",
    path=WS + "/files/content",
    hints=REWRITE,
    summary="Write a whole file atomically.",
)
async def file_write(svc: Service, inp: FileWrite) -> FileWriteResult:
    if inp.path == WORKSPACE_ROOT:
        raise InvalidArgumentError("path: name a file, not the workspace root", field="path")
    payload = decode_input(inp.content, inp.encoding, "content")
    args = {"path": inp.path, "create_parents": inp.create_parents}
    with naming("path", NotFoundError, ConflictError):
        result, _ = await svc.request(inp.workspace_id, "file.write", args, payload)
    return FileWriteResult.model_validate(
        {"size": len(payload), "created": False, "path": inp.path, **result}
    )


@declare(
    method="POST",
    path=WS + "/files/edit",
    hints=WRITE,
    summary="Replace exact text in a file.",
)
async def file_edit(svc: Service, inp: FileEdit) -> FileEditResult:
    args: dict[str, Any] = {"path": inp.path, "old": inp.old, "new": inp.new}
    if inp.expected_replacements is not None:
        args["expected"] = inp.expected_replacements
    # A conflict here is about old (how many times it was found), not the path.
    with naming("path", NotFoundError):
        result, _ = await svc.request(inp.workspace_id, "file.edit", args)
    return FileEditResult.model_validate({"replacements": 0, "path": inp.path, **result})


@declare(
    method="GET",
    path=WS + "/files",
    hints=READ,
    summary="List a directory's entries.",
)
async def file_list(svc: Service, inp: FileList) -> FileListResult:
    # The agent counts levels below the directory (0 = its own entries); clients count levels.
    args = {"path": inp.path, "depth": inp.depth - 1, "max_entries": inp.max_entries}
    with naming("path", NotFoundError):
        result, _ = await svc.request(inp.workspace_id, "file.list", args)
    entries = result.get("entries") or []
    return FileListResult.model_validate(
        {"path": inp.path, "entries": entries, "truncated": bool(result.get("truncated"))}
    )


@declare(
    method="DELETE",
    path=WS + "/files",
    hints=DESTROY,
    summary="Remove a file, a symlink (not its target) or a directory.",
)
async def file_remove(svc: Service, inp: FileRemove) -> FileRemoveResult:
    if inp.path == WORKSPACE_ROOT:
        raise InvalidArgumentError(
            "path: the workspace root itself cannot be removed", field="path"
        )
    args = {"path": inp.path, "recursive": inp.recursive}
    with naming("path", NotFoundError, ConflictError):
        result, _ = await svc.request(inp.workspace_id, "file.remove", args)
    return FileRemoveResult(path=inp.path, removed=int(result.get("removed", 1)))


@declare(
    method="GET",
    path=WS + "/files/search",
    hints=READ,
    summary="Search file contents or names; honours .gitignore.",
)
async def file_search(svc: Service, inp: FileSearch) -> FileSearchResult:
    args: dict[str, Any] = {
        "path": inp.path,
        "pattern": inp.pattern,
        "max_results": inp.max_results,
    }
    if inp.mode == "name":
        op = "file.glob"
    else:
        op = "file.grep"
        args["case_insensitive"] = inp.case_insensitive
        if inp.glob is not None:
            args["glob"] = inp.glob
    with naming("path", NotFoundError):
        result, _ = await svc.request(inp.workspace_id, op, args)
    return FileSearchResult.model_validate(result)
