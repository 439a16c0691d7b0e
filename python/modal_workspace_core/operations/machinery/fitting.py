"""An answer fitted to a budget of encoded JSON characters: what GPT Actions receives is the JSON,
so the bound is on it, not on the raw bytes (a `"` costs two characters, a control character
six, binary content four for every three bytes).

Each output type declares on its class how it gives less (`Output.gives_less`), in the order it
gives it up, and says how to get the rest: file content keeps a prefix and moves `next_offset`
back (`KeepReadStart`), command output keeps each stream's head and tail (`KeepHeadAndTail`),
a diff its start (`KeepStart`), lists their first entries (`KeepFirst`), each setting its
`truncated` flag. `fit_json` knows no output type: an output that declares nothing, or that
cannot be fitted, is an error, never an oversized answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from ...errors import UpstreamError

__all__ = [
    "KeepFirst",
    "KeepHeadAndTail",
    "KeepLast",
    "KeepReadStart",
    "KeepStart",
    "Shrink",
    "fit_json",
]

M = TypeVar("M", bound=BaseModel)
_OMITTED = "\n[... {} characters omitted to fit the response ...]\n"


class Shrink(Protocol):
    """One way an output gives less: `fit` answers a copy whose JSON is as close to `most`
    characters as this way allows, saying what it cut."""

    def fields(self) -> dict[str, type]:
        """The fields it reads and writes, each with the type it needs there."""
        ...

    def fit(self, result: M, most: int) -> M: ...


def fit_json(result: BaseModel, most: int) -> str:
    """`result`'s JSON, at most `most` characters: it gives less the ways its class declares,
    each in turn until it fits."""
    text = result.model_dump_json()
    if len(text) <= most:
        return text
    for shrink in getattr(type(result), "gives_less", ()):
        result = shrink.fit(result, most)
        text = result.model_dump_json()
        if len(text) <= most:
            return text
    raise UpstreamError(
        "upstream",
        f"the answer would be {len(text)} characters, over this API's {most}: ask for less "
        "(a smaller max_bytes or a narrower path)",
    )


def check_declared(model: type[BaseModel], shrinks: tuple[Shrink, ...]) -> None:
    """Refuses, when the class is defined, a way of giving less that names a field the class
    does not have, or one of another kind (a list to cut that is text, a flag that is not)."""
    for shrink in shrinks:
        for name, kind in shrink.fields().items():
            field = model.model_fields.get(name)
            annotation = getattr(field, "annotation", None)
            origin = getattr(annotation, "__origin__", annotation)
            if field is None or origin is not kind:
                raise TypeError(
                    f"{model.__name__}.gives_less: {type(shrink).__name__} needs a {kind.__name__} "
                    f"field {name!r}"
                )


@dataclass(frozen=True)
class KeepFirst:
    """A list field keeps its first entries that fit, and `flag` says more exist."""

    field: str
    flag: str = "truncated"

    def fields(self) -> dict[str, type]:
        return {self.field: list, self.flag: bool}

    def fit(self, result: M, most: int) -> M:
        entries = list(getattr(result, self.field))
        low, high = 0, len(entries)
        while low < high:
            mid = (low + high + 1) // 2
            update = {self.field: self.kept(entries, mid), self.flag: True}
            if len(result.model_copy(update=update).model_dump_json()) <= most:
                low = mid
            else:
                high = mid - 1
        return result.model_copy(update={self.field: self.kept(entries, low), self.flag: True})

    def kept(self, entries: list[Any], count: int) -> list[Any]:
        return entries[:count]


@dataclass(frozen=True)
class KeepLast(KeepFirst):
    """A list field keeps its last entries that fit (the newest, in a list oldest first), and
    `flag` says earlier ones exist."""

    def kept(self, entries: list[Any], count: int) -> list[Any]:
        return entries[len(entries) - count :]


@dataclass(frozen=True)
class KeepStart:
    """A text field keeps its start, and `flag` says it was cut."""

    field: str
    flag: str = "truncated"

    def fields(self) -> dict[str, type]:
        return {self.field: str, self.flag: bool}

    def fit(self, result: M, most: int) -> M:
        room = _room(result, most, **{self.field: "", self.flag: True})
        text = _prefix_within(getattr(result, self.field), room)
        return result.model_copy(update={self.field: text, self.flag: True})


@dataclass(frozen=True)
class KeepHeadAndTail:
    """Text fields that share the room, each given as (field, its flag): a field that fits its
    share keeps what it has and leaves the rest to the larger ones, so three bytes of stdout
    stay whole beside megabytes of stderr; a field cut keeps its head and its tail around a
    marker of what was left out, and its flag says so."""

    texts: tuple[tuple[str, str], ...]

    def __init__(self, *texts: tuple[str, str]) -> None:
        object.__setattr__(self, "texts", texts)

    def fields(self) -> dict[str, type]:
        found: dict[str, type] = {}
        for text, flag in self.texts:
            found |= {text: str, flag: bool}
        return found

    def fit(self, result: M, most: int) -> M:
        left = _room(result, most, **{text: "" for text, _ in self.texts})
        sizes = {text: _escaped(getattr(result, text)) for text, _ in self.texts}
        # The smallest first: each takes what it has, at most an equal share of what is left.
        by_size = sorted(self.texts, key=lambda pair: sizes[pair[0]])
        update: dict[str, Any] = {}
        for index, (text, flag) in enumerate(by_size):
            room = min(sizes[text], left // (len(by_size) - index))
            left -= room
            if sizes[text] > room:
                update[text] = _head_and_tail(getattr(result, text), room)
                update[flag] = True
        return result.model_copy(update=update)


@dataclass(frozen=True)
class KeepReadStart:
    """A read's content keeps a prefix, and `next_offset` moves back to where the rest starts
    (in bytes; base64 content in whole groups of four characters, three bytes, so the rest
    starts on a byte boundary); `eof` is false, since the caller reads on."""

    content: str = "content"
    encoding: str = "encoding"
    offset: str = "offset"
    size: str = "size"
    next_offset: str = "next_offset"
    eof: str = "eof"

    def fields(self) -> dict[str, type]:
        numbers = {self.offset: int, self.size: int, self.next_offset: int}
        return {self.content: str, self.eof: bool, **numbers}

    def fit(self, result: M, most: int) -> M:
        # The room left once the largest next_offset the answer could say is written.
        largest = getattr(result, self.size)
        room = _room(result, most, **{self.content: "", self.next_offset: largest, self.eof: False})
        content = getattr(result, self.content)
        if getattr(result, self.encoding) == "base64":
            kept = content[: max(room, 0) // 4 * 4]
            consumed = len(kept) // 4 * 3
        else:
            kept = _prefix_within(content, room)
            consumed = len(kept.encode())
        start = getattr(result, self.offset)
        update = {self.content: kept, self.next_offset: start + consumed, self.eof: False}
        return result.model_copy(update=update)


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


def _head_and_tail(text: str, room: int) -> str:
    """The start and the end of `text` within `room`, with a marker of what was left out."""
    marker = _OMITTED.format(len(text))
    half = max(room - _escaped(marker), 0) // 2
    head = _prefix_within(text, half)
    tail = _suffix_within(text[len(head) :], half)
    omitted = len(text) - len(head) - len(tail)
    return head + _OMITTED.format(omitted) + tail


def _room(result: BaseModel, most: int, **emptied: Any) -> int:
    """What is left for the emptied fields' content once everything else is written."""
    return most - len(result.model_copy(update=emptied).model_dump_json())
