"""A response fitted to a budget of encoded JSON characters: what GPT Actions receives is the
JSON, so the bound is on it, not on the raw bytes (a `"` costs two characters, a control
character six, binary content four for every three bytes).

Each bulky output knows how to give less and say how to get the rest: file content keeps a
prefix and moves `next_offset` back, command output and diffs keep what fits and set their
`truncated` flag, lists keep their first entries and set `truncated`. An output that cannot be
fitted is an error, never an oversized answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from ...errors import UpstreamError
from ...operations.artifacts import ArtifactListing
from ...operations.execs import ExecListResult, ExecResult
from ...operations.files import FileContent, FileListResult, FileSearchResult
from ...operations.repo.delivery import RepoCommitResult, RepoPushResult
from ...operations.repo.status import RepoDiff, RepoStatus
from ...operations.watches import WatchListResult
from ...operations.workspaces import WorkspaceListResult

__all__ = ["fit_json"]

M = TypeVar("M", bound=BaseModel)
_OMITTED = "\n[... {} characters omitted to fit the response ...]\n"


def fit_json(result: BaseModel, most: int) -> str:
    """`result`'s JSON, at most `most` characters."""
    text = result.model_dump_json()
    if len(text) <= most:
        return text
    fitter = _FITTERS.get(type(result))
    if fitter is not None:
        text = fitter(result, most).model_dump_json()
        if len(text) <= most:
            return text
    raise UpstreamError(
        "upstream",
        f"the answer would be {len(text)} characters, over this API's {most}: ask for less "
        "(a smaller max_bytes or a narrower path)",
    )


def _escaped(text: str) -> int:
    """Characters `text` takes inside a JSON string (as pydantic writes it: UTF-8, not \\u)."""
    return len(json.dumps(text, ensure_ascii=False)) - 2


def _prefix_within(text: str, room: int) -> str:
    """The longest prefix of `text` whose escaped form takes at most `room` characters."""
    if _escaped(text) <= room:
        return text
    low, high = 0, min(len(text), max(room, 0))
    while low < high:
        mid = (low + high + 1) // 2
        if _escaped(text[:mid]) <= room:
            low = mid
        else:
            high = mid - 1
    return text[:low]


def _suffix_within(text: str, room: int) -> str:
    return _prefix_within(text[::-1], room)[::-1]


def _room(result: BaseModel, most: int, **emptied: Any) -> int:
    """What is left for the emptied fields' content once everything else is written."""
    return most - len(result.model_copy(update=emptied).model_dump_json())


def _file(result: FileContent, most: int) -> FileContent:
    room = _room(result, most, content="", next_offset=result.size, eof=False)
    if result.encoding == "base64":
        # Whole groups of four characters (three bytes), so the rest starts on a byte boundary.
        keep = max(room, 0) // 4 * 4
        content = result.content[:keep]
        consumed = len(content) // 4 * 3
    else:
        content = _prefix_within(result.content, room)
        consumed = len(content.encode())
    return result.model_copy(
        update={"content": content, "next_offset": result.offset + consumed, "eof": False}
    )


def _head_and_tail(text: str, room: int) -> str:
    """The start and the end of `text` within `room`, with a marker of what was left out."""
    marker = _OMITTED.format(len(text))
    half = max(room - _escaped(marker), 0) // 2
    head = _prefix_within(text, half)
    tail = _suffix_within(text[len(head) :], half)
    omitted = len(text) - len(head) - len(tail)
    return head + _OMITTED.format(omitted) + tail


def _exec(result: ExecResult, most: int) -> ExecResult:
    room = _room(result, most, stdout="", stderr="")
    out, err = _escaped(result.stdout), _escaped(result.stderr)
    # The smaller stream keeps what it has when it fits in half; the other gets the rest.
    small = min(out, err, room // 2)
    rooms = (small, room - small) if out <= err else (room - small, small)
    update: dict[str, Any] = {}
    for name, stream_room in zip(("stdout", "stderr"), rooms, strict=True):
        text = getattr(result, name)
        if _escaped(text) > stream_room:
            update[name] = _head_and_tail(text, stream_room)
            update[f"{name}_truncated"] = True
    return result.model_copy(update=update)


def _diff(result: RepoDiff, most: int) -> RepoDiff:
    room = _room(result, most, diff="", truncated=True)
    return result.model_copy(update={"diff": _prefix_within(result.diff, room), "truncated": True})


def _entries(name: str) -> Callable[[M, int], M]:
    """Keeps the first entries of list field `name` that fit, and sets `truncated`."""

    def fit(result: M, most: int) -> M:
        entries = list(getattr(result, name))
        low, high = 0, len(entries)
        while low < high:
            mid = (low + high + 1) // 2
            update = {name: entries[:mid], "truncated": True}
            if len(result.model_copy(update=update).model_dump_json()) <= most:
                low = mid
            else:
                high = mid - 1
        return result.model_copy(update={name: entries[:low], "truncated": True})

    return fit


def _each(*names: str) -> Callable[[M, int], M]:
    """Cuts list fields in turn, the first named first, until the answer fits."""
    fitters = [_entries(name) for name in names]

    def fit(result: M, most: int) -> M:
        for fitter in fitters:
            if len(result.model_dump_json()) <= most:
                break
            result = fitter(result, most)
        return result

    return fit


_FITTERS: dict[type[BaseModel], Callable[[Any, int], BaseModel]] = {
    FileContent: _file,
    ExecResult: _exec,
    RepoDiff: _diff,
    FileListResult: _entries("entries"),
    RepoStatus: _entries("entries"),
    FileSearchResult: _entries("hits"),
    WorkspaceListResult: _entries("workspaces"),
    ExecListResult: _entries("execs"),
    WatchListResult: _entries("watches"),
    RepoCommitResult: _entries("files"),
    # The files go first: the commits are what a person reviews before a pull request.
    RepoPushResult: _each("files", "commits"),
    ArtifactListing: _entries("listing"),
}
