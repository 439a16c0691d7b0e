"""What the test control plane keeps of volumes (VolumeFS v2): each volume's files and
directories, and the content-addressed blocks their bytes live in (see `volumes` for the calls
and `blocks` for the HTTP server the SDK moves blocks through).

A file is its list of block digests (sha256 of each `BLOCK_SIZE` slice of the file, trailing zero
bytes left out, as the SDK hashes them) plus its size, mode and mtime; a block is stored once,
whichever files name it. Directories are implied by the files under them and stay, empty, once
those are removed, as on a file system. Everything here is touched only from the control plane's
own event loop.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field
from urllib.parse import urlencode

from grpclib import GRPCError, Status
from modal._utils.blob_utils import BLOCK_SIZE

from .sandboxes import v1_id

__all__ = ["BLOCK_SIZE", "VolumeFile", "VolumeRecord", "VolumesState", "normalise"]


def normalise(path: str) -> str:
    """A volume path as the service reads it: relative to the volume's root (a leading `/` and
    empty or `.` segments are dropped), "" for the root; `..` is refused."""
    if "\0" in path:
        raise GRPCError(Status.INVALID_ARGUMENT, f"invalid path {path!r}")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise GRPCError(Status.INVALID_ARGUMENT, f"path {path!r} may not contain '..'")
    return "/".join(parts)


def parent_of(path: str) -> str:
    return path.rpartition("/")[0]


def ancestors(path: str) -> list[str]:
    """The directories above `path`, outermost first, the root ("") left out."""
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def block_length(size: int, index: int) -> int:
    """How many bytes of a `size`-byte file block `index` holds (trailing zeros included)."""
    return max(0, min(BLOCK_SIZE, size - index * BLOCK_SIZE))


def block_count(size: int) -> int:
    return -(-size // BLOCK_SIZE)


@dataclass(frozen=True)
class VolumeFile:
    blocks: tuple[bytes, ...]  # raw sha256 digests, one per BLOCK_SIZE slice
    size: int
    mode: int
    mtime: int


@dataclass
class VolumeRecord:
    volume_id: str
    name: str
    # The `version` of every VolumeGetOrCreate for this volume, exactly as the request carried it.
    requested_versions: list[int] = field(default_factory=list)
    files: dict[str, VolumeFile] = field(default_factory=dict)
    # Directories (implied by the files put under them) and their mtimes; the root is implicit.
    dirs: dict[str, int] = field(default_factory=dict)

    def kind(self, path: str) -> str | None:
        """ "file", "dir" or None (missing); the root is always a directory."""
        if path == "" or path in self.dirs:
            return "dir"
        return "file" if path in self.files else None

    def touch(self, directory: str, mtime: int) -> None:
        """A directory's entries changed: its mtime moves, as on a file system."""
        if directory in self.dirs:
            self.dirs[directory] = mtime


@dataclass
class VolumesState:
    by_name: dict[str, str] = field(default_factory=dict)
    records: dict[str, VolumeRecord] = field(default_factory=dict)
    # Block contents by raw sha256 digest (trailing zero bytes left out, as uploaded).
    blocks: dict[bytes, bytes] = field(default_factory=dict)
    # In every block URL: a client without it can neither read nor write blocks.
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    # The block server's base URL (`http://127.0.0.1:port`), set when it starts.
    block_url: str = ""

    # -- volumes ---------------------------------------------------------------------------

    def create(self, name: str, volume_id: str | None = None) -> VolumeRecord:
        record = VolumeRecord(volume_id or v1_id("vo"), name)
        self.by_name[name] = record.volume_id
        self.records[record.volume_id] = record
        return record

    def named(self, name: str) -> VolumeRecord | None:
        volume_id = self.by_name.get(name)
        return None if volume_id is None else self.records.get(volume_id)

    def get(self, volume_id: str) -> VolumeRecord:
        record = self.records.get(volume_id)
        if record is None:
            raise GRPCError(Status.NOT_FOUND, f"Volume {volume_id} not found")
        return record

    def delete(self, volume_id: str) -> None:
        record = self.get(volume_id)
        del self.records[volume_id]
        if self.by_name.get(record.name) == volume_id:
            del self.by_name[record.name]

    def contents(self, record: VolumeRecord, path: str) -> bytes:
        """A file's bytes, its blocks padded back to their lengths."""
        file = record.files[path]
        return b"".join(
            self.blocks[digest].ljust(block_length(file.size, index), b"\0")
            for index, digest in enumerate(file.blocks)
        )

    # -- block URLs and upload receipts -------------------------------------------------------

    def put_url(self, digest: bytes) -> str:
        return f"{self.block_url}/blocks/{self.token}/{digest.hex()}"

    def get_url(self, digest: bytes, offset: int, length: int, *, pad: bool) -> str:
        query = urlencode({"offset": offset, "len": length, "pad": int(pad)})
        return f"{self.block_url}/blocks/{self.token}/{digest.hex()}?{query}"

    def receipt(self, digest: bytes) -> bytes:
        """The body a block PUT answers, which the SDK hands back as the block's `put_response`:
        proof that this plane stored exactly this block."""
        mac = hmac.new(self.token.encode(), b"block-put\0" + digest, hashlib.sha256).hexdigest()
        return f"mcp-block-put:{digest.hex()}:{mac}".encode()


def now() -> int:
    return int(time.time())
