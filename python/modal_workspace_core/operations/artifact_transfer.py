"""Moving an artifact's bytes through the agent: a download packed into the agent's staging
directory (`archive.create`) and read back in frame-sized chunks, an upload written there in
chunks and extracted (`archive.extract`), and the signed links that let a client without the
bearer token fetch one workspace's path until the link expires.

The staged archive is removed however the transfer ends; one a vanished gateway leaves behind
is pruned by the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .. import _core
from ..errors import LimitError, PermissionDeniedError, core_refusal
from ..policy import WORKSPACE_ROOT
from ..runtime.call import LINK_BASE
from .machinery.table import RawReply

if TYPE_CHECKING:
    from ..runtime.service import Service

# One frame carries at most 4 MiB with its header (`_core` frames): chunks stay well inside.
CHUNK_BYTES = 3 * 1024 * 1024
# The most entries an archive may hold (the agent's own bound is higher).
MAX_ENTRIES = 500_000
# Where links are served, under the gateway's public base (no bearer token: the link is it).
LINK_ROUTE = "/artifact-links/"

Format = Literal["tar", "file"]


def new_archive_id() -> str:
    return secrets.token_hex(16)


async def pack(
    svc: Service, workspace_id: str, path: str, *, dry_run: bool, list_max: int = 0
) -> tuple[str, dict[str, Any]]:
    """(archive id, the agent's summary) of `path` packed (or only listed, `dry_run`)."""
    archive_id = new_archive_id()
    args = {
        "archive_id": archive_id,
        "path": path,
        "dry_run": dry_run,
        "max_bytes": svc.settings.artifact_max_bytes,
        "max_entries": MAX_ENTRIES,
        "list_max": list_max,
    }
    summary, _ = await svc.request(workspace_id, "archive.create", args)
    return archive_id, summary


async def remove(svc: Service, workspace_id: str, archive_id: str) -> None:
    with contextlib.suppress(Exception):  # the agent prunes what this cannot remove
        await svc.request(workspace_id, "archive.remove", {"archive_id": archive_id})


def _name(path: str) -> str:
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return "workspace" if path.rstrip("/") == WORKSPACE_ROOT or not name else name


async def download(svc: Service, workspace_id: str, path: str) -> RawReply:
    """`path` packed and streamed: a file's bytes, or a directory as a tar."""
    archive_id, summary = await pack(svc, workspace_id, path, dry_run=False)
    size = int(summary.get("size", 0))
    is_dir = summary.get("kind") == "dir"

    async def chunks() -> AsyncIterator[bytes]:
        offset = 0
        while offset < size:
            args = {"archive_id": archive_id, "offset": offset, "max_len": CHUNK_BYTES}
            _, data = await svc.request(workspace_id, "archive.read", args)
            if not data:
                raise RuntimeError("the staged archive ended early")
            offset += len(data)
            yield data

    async def close() -> None:
        # Spawned: a client that went away cancels the stream, and with it any await here.
        svc.spawn(remove(svc, workspace_id, archive_id))

    return RawReply(
        chunks=chunks(),
        length=size,
        media_type="application/x-tar" if is_dir else "application/octet-stream",
        filename=_name(path) + (".tar" if is_dir else ""),
        close=close,
    )


async def upload(
    svc: Service,
    workspace_id: str,
    path: str,
    body: AsyncIterator[bytes],
    *,
    fmt: Format,
    overwrite: bool,
) -> dict[str, Any]:
    """`body` staged in chunks, then unpacked at `path` all at once; the agent's outcome."""
    archive_id = new_archive_id()
    most = svc.settings.artifact_max_bytes
    offset = 0
    pending = bytearray()

    async def send(data: bytes) -> None:
        nonlocal offset
        args = {"archive_id": archive_id, "offset": offset, "max_bytes": most}
        await svc.request(workspace_id, "archive.write", args, data)
        offset += len(data)

    try:
        await send(b"")  # an empty upload is an empty file (or an empty, invalid tar)
        async for chunk in body:
            pending += chunk
            if offset + len(pending) > most:
                raise LimitError(
                    f"the upload is over {most} bytes (MODAL_WORKSPACE_ARTIFACT_MAX_BYTES)"
                )
            while len(pending) >= CHUNK_BYTES:
                await send(bytes(pending[:CHUNK_BYTES]))
                del pending[:CHUNK_BYTES]
        if pending:
            await send(bytes(pending))
        args = {
            "archive_id": archive_id,
            "path": path,
            "format": fmt,
            "overwrite": overwrite,
            "max_bytes": most,
            "max_entries": MAX_ENTRIES,
        }
        outcome, _ = await svc.request(workspace_id, "archive.extract", args)
        return outcome
    finally:
        svc.spawn(remove(svc, workspace_id, archive_id))


def mint_link(svc: Service, workspace_id: str, path: str) -> tuple[str, int] | None:
    """(the link's path under the gateway, its expiry in unix seconds), or None when this
    gateway has no key to sign with (no tokens and no channel secret)."""
    key = svc.settings.link_secret
    if key is None:
        return None
    expires = int(time.time()) + svc.settings.artifact_link_seconds
    return LINK_ROUTE + _core.mint_link(key, workspace_id, path, expires), expires


def link_url(link_path: str) -> str | None:
    base = LINK_BASE.get()
    return base.rstrip("/") + link_path if base else None


def verify_link(svc: Service, token: str) -> tuple[str, str]:
    """(workspace id, path) a link's token names; refused (403) when altered or expired."""
    key = svc.settings.link_secret
    if key is None:
        raise PermissionDeniedError("this gateway serves no download links")
    # A link that cannot be read is malformed input; one that fails its signature or lifetime
    # is refused as a permission (`errors.from_policy_error`).
    with core_refusal(None):
        workspace_id, path, _ = _core.verify_link(key, token, int(time.time()))
    return workspace_id, path


async def write_to(reply: RawReply, dest: Path) -> int:
    """Writes a download's bytes to the local file `dest` as they arrive; the bytes written."""
    written = 0
    try:
        with dest.open("wb") as out:
            async for chunk in reply.chunks:
                await asyncio.to_thread(out.write, chunk)
                written += len(chunk)
    finally:
        if reply.close is not None:
            await reply.close()
    return written


@dataclass(frozen=True)
class LocalBody:
    """What an upload of a local path sends: its chunks, whether they are a file's bytes or a
    tree's tar, and how many bytes they come to."""

    chunks: AsyncIterator[bytes]
    format: Format
    size: int
    # The tar written for a tree: removed once read, or by `discard` when it never is.
    temporary: Path | None = None

    def discard(self) -> None:
        if self.temporary is not None:
            self.temporary.unlink(missing_ok=True)


async def local_chunks(src: Path) -> tuple[AsyncIterator[bytes], Format]:
    """A local file's bytes, or a local directory's tree as a tar, in chunks; and which of the
    two it is (`local_body`)."""
    body = await local_body(src)
    return body.chunks, body.format


async def local_body(src: Path) -> LocalBody:
    """A local file's bytes, or a local directory's tree as a tar (written to a temporary file
    first, so nothing is held whole), in chunks."""
    if not src.is_dir():
        return LocalBody(_chunks_of(src, remove=False), "file", src.stat().st_size)
    fd, name = tempfile.mkstemp(suffix=".tar")
    os.close(fd)
    archive = Path(name)

    def pack() -> None:
        with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(src.rglob("*")):
                tar.add(path, arcname=path.relative_to(src).as_posix(), recursive=False)

    try:
        await asyncio.to_thread(pack)
        size = archive.stat().st_size
    except BaseException:
        archive.unlink(missing_ok=True)
        raise
    return LocalBody(_chunks_of(archive, remove=True), "tar", size, archive)


async def _chunks_of(path: Path, *, remove: bool) -> AsyncIterator[bytes]:
    try:
        with path.open("rb") as f:
            while chunk := await asyncio.to_thread(f.read, CHUNK_BYTES):
                yield chunk
    finally:
        if remove:
            path.unlink(missing_ok=True)
