"""Handlers of files and file watches, on the agent's contained file operations.

Paths arrive validated and normalised under `/workspace`; the agent gets them relative to its
root (which resolves them race-free, refusing escapes through symlinks) and results go back
under `/workspace` again (shown under the workspace's own root by `path_view`).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from . import policy
from .errors import InvalidArgumentError
from .event_pages import PageResult
from .models import (
    WORKSPACE_ROOT,
    FileEdit,
    FileList,
    FileRead,
    FileRemove,
    FileSearch,
    FileWrite,
    WatchEvents,
    WatchListInput,
    WatchRef,
    WatchStart,
)
from .models import relative as rel
from .ops_execs import decode_input, stream_page
from .results import (
    FileContent,
    FileEditResult,
    FileListResult,
    FileRemoveResult,
    FileSearchResult,
    FileWriteResult,
    WatchListResult,
    WatchStatus,
)
from .service_core import client_path

if TYPE_CHECKING:
    from .service_core import Service


def _with_path(result: dict[str, Any], fallback: str) -> dict[str, Any]:
    path = result.get("path")
    return {**result, "path": client_path(path) if isinstance(path, str) else fallback}


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


async def file_read(svc: Service, inp: FileRead) -> FileContent:
    args = {"path": rel(inp.path), "offset": inp.offset, "max_len": inp.max_bytes}
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


async def file_write(svc: Service, inp: FileWrite) -> FileWriteResult:
    if inp.path == WORKSPACE_ROOT:
        raise InvalidArgumentError("path: name a file, not the workspace root", field="path")
    payload = decode_input(inp.content, inp.encoding, "content")
    args = {"path": rel(inp.path), "create_parents": inp.create_parents}
    result, _ = await svc.request(inp.workspace_id, "file.write", args, payload)
    return FileWriteResult.model_validate(
        {"size": len(payload), "created": False, **_with_path(result, inp.path)}
    )


async def file_edit(svc: Service, inp: FileEdit) -> FileEditResult:
    args: dict[str, Any] = {"path": rel(inp.path), "old": inp.old, "new": inp.new}
    if inp.expected_replacements is not None:
        args["expected"] = inp.expected_replacements
    result, _ = await svc.request(inp.workspace_id, "file.edit", args)
    return FileEditResult.model_validate({"replacements": 0, **_with_path(result, inp.path)})


async def file_list(svc: Service, inp: FileList) -> FileListResult:
    # The agent counts levels below the directory (0 = its own entries); clients count levels.
    args = {"path": rel(inp.path), "depth": inp.depth - 1, "max_entries": inp.max_entries}
    result, _ = await svc.request(inp.workspace_id, "file.list", args)
    entries = [_with_path(e, inp.path) for e in result.get("entries") or []]
    return FileListResult.model_validate(
        {"path": inp.path, "entries": entries, "truncated": bool(result.get("truncated"))}
    )


async def file_remove(svc: Service, inp: FileRemove) -> FileRemoveResult:
    if inp.path == WORKSPACE_ROOT:
        raise InvalidArgumentError(
            "path: the workspace root itself cannot be removed", field="path"
        )
    args = {"path": rel(inp.path), "recursive": inp.recursive}
    result, _ = await svc.request(inp.workspace_id, "file.remove", args)
    return FileRemoveResult(path=inp.path, removed=int(result.get("removed", 1)))


async def file_search(svc: Service, inp: FileSearch) -> FileSearchResult:
    args: dict[str, Any] = {
        "path": rel(inp.path),
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
    result, _ = await svc.request(inp.workspace_id, op, args)
    hits = [_with_path(h, inp.path) for h in result.get("hits") or []]
    return FileSearchResult.model_validate({**result, "hits": hits})


def _watch_out(watch_id: str, status: dict[str, Any]) -> WatchStatus:
    data = {**status, "watch_id": status.get("watch_id") or watch_id}
    if isinstance(data.get("path"), str):
        data["path"] = client_path(data["path"])
    return WatchStatus.model_validate(data)


async def workspace_file_watch_start(svc: Service, inp: WatchStart) -> WatchStatus:
    watch_id = policy.new_id("fw")
    args: dict[str, Any] = {"watch_id": watch_id, "path": rel(inp.path)}
    if inp.kinds is not None:
        args["kinds"] = inp.kinds
    if inp.timeout_seconds is not None:
        args["timeout_seconds"] = inp.timeout_seconds
    result, _ = await svc.request(inp.workspace_id, "watch.start", args)
    return _watch_out(watch_id, result)


async def workspace_file_watch_events(svc: Service, inp: WatchEvents) -> PageResult:
    return await stream_page(svc, inp, inp.watch_id)


async def workspace_file_watch_status(svc: Service, inp: WatchRef) -> WatchStatus:
    result, _ = await svc.request(inp.workspace_id, "watch.status", {"watch_id": inp.watch_id})
    return _watch_out(inp.watch_id, result)


async def workspace_file_watch_list(svc: Service, inp: WatchListInput) -> WatchListResult:
    result, _ = await svc.request(inp.workspace_id, "watch.list", {})
    return WatchListResult(watches=[_watch_out("", w) for w in result.get("watches") or []])


async def workspace_file_watch_cancel(svc: Service, inp: WatchRef) -> WatchStatus:
    result, _ = await svc.request(inp.workspace_id, "watch.cancel", {"watch_id": inp.watch_id})
    return _watch_out(inp.watch_id, result)
