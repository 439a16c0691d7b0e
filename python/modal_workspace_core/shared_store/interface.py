"""`SharedStore`: records by key, with the one atomic step that two gateway processes need to
agree without a lock server: `create`, which writes a record only where none is.

Keys are `/`-separated names (`oauth/tokens/<digest>`): folders, then the record's name. Callers
build them from their own ids and from digests of what clients send, never from client text
itself, and `check_key` holds that shape on every call, so a key never leaves its folder.
"""

from __future__ import annotations

import re
from typing import Protocol

__all__ = ["MAX_SEGMENTS", "SharedStore", "check_folder", "check_key"]

MAX_SEGMENTS = 8
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,159}")


class SharedStore(Protocol):
    """Records every gateway process of a deployment sees, each as soon as its write returns.

    Each call is atomic on its own: a reader sees a record whole or not at all."""

    async def read(self, key: str) -> bytes | None:
        """The record, or None where there is none."""
        ...

    async def write(self, key: str, value: bytes) -> None:
        """Puts the record, replacing any there."""
        ...

    async def create(self, key: str, value: bytes) -> bool:
        """Puts the record only where there is none: False when one was there (it is kept).
        Of several processes creating one key at once, exactly one gets True."""
        ...

    async def remove(self, key: str) -> None:
        """Removes the record, or the folder and everything in it; nothing there is fine."""
        ...

    async def names(self, folder: str) -> list[str]:
        """The names directly in the folder (records and folders), sorted; [] for a folder
        that does not exist. A name may be a folder that holds nothing."""
        ...


def check_key(key: str) -> str:
    """The key, when it has the shape every key has; else ValueError (a bug of the caller)."""
    segments = key.split("/")
    if not 1 < len(segments) <= MAX_SEGMENTS or not all(_SEGMENT.fullmatch(s) for s in segments):
        raise ValueError(f"not a shared store key: {key[:200]!r}")
    return key


def check_folder(folder: str) -> str:
    """A folder has a key's shape, with at least one name."""
    segments = folder.split("/")
    if not 0 < len(segments) < MAX_SEGMENTS or not all(_SEGMENT.fullmatch(s) for s in segments):
        raise ValueError(f"not a shared store folder: {folder[:200]!r}")
    return folder
