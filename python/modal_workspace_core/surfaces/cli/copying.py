"""`cp`: a file or a tree between this machine and a workspace, either way, byte for byte, through
the artifact operations (`artifact_upload`: a file's bytes or a tree's tar, all landing at once;
`artifact_download`: the same back), whatever the size, with a bar of the bytes moved.

Where a copy lands, as `cp` has it: at the destination, or inside it when it is a directory
that exists (or, for a workspace path, ends with `/`). Something already where it lands is
replaced only with `--overwrite`, whole: trees are never merged.

A downloaded tree came from a workspace, so its tar is untrusted: it is unpacked with tarfile's
`data` filter (no absolute names, no `..`, no link out of the tree, no devices) into a fresh
directory beside the destination, then moved into place.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tarfile
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ConflictError, InvalidArgumentError, NotFoundError
from ...operations.artifact_transfer import local_body
from ...policy import WORKSPACE_ROOT
from .contract import Client
from .output import Output

__all__ = ["Remote", "copy", "remote_path"]

_REMOTE = re.compile(r"^(?P<ws>ws-[0-9a-f]{32}):(?P<path>.*)$", re.S)


@dataclass(frozen=True)
class Remote:
    workspace_id: str
    path: str

    def __str__(self) -> str:
        return f"{self.workspace_id}:{self.path}"


def remote_path(arg: str) -> Remote | None:
    """`ws-…:PATH` as a workspace path (an empty PATH: the workspace's root); None for a local
    path (`./ws-…:x` names a local file of that name)."""
    match = _REMOTE.match(arg)
    if match is None:
        return None
    return Remote(match["ws"], match["path"] or WORKSPACE_ROOT)


async def copy(client: Client, out: Output, source: str, dest: str, overwrite: bool) -> int:
    src_remote, dest_remote = remote_path(source), remote_path(dest)
    if (src_remote is None) == (dest_remote is None):
        raise InvalidArgumentError(
            "name one side in a workspace (ws-…:PATH) and the other on this machine"
        )
    if dest_remote is not None:
        return await _upload(client, out, Path(source), dest_remote, overwrite)
    assert src_remote is not None
    return await _download(client, out, src_remote, Path(dest), overwrite)


async def _upload(client: Client, out: Output, source: Path, dest: Remote, overwrite: bool) -> int:
    if not source.exists():
        raise NotFoundError(f"{source}: no such file or directory here")
    name = source.resolve().name
    path = dest.path
    if path.endswith("/") or await _is_remote_dir(client, dest):
        path = f"{path.rstrip('/')}/{name}"
    body = await local_body(source)
    try:
        with out.bytes_bar(f"sending {name}", body.size) as advance:
            counted = _counted(body.chunks, advance)
            sent = type(body)(counted, body.format, body.size, body.temporary)
            landed = await client.upload(dest.workspace_id, path, sent, overwrite=overwrite)
    except ConflictError as exc:
        if exc.field != "path":
            raise
        # The operation names its own field; here it is an option.
        raise ConflictError(
            f"{dest.workspace_id}:{path} exists: pass --overwrite to replace it"
        ) from None
    finally:
        body.discard()
    document = {"source": str(source), "destination": f"{dest.workspace_id}:{landed['path']}"}
    document |= landed
    out.result(document, _copied(source, document["destination"], landed))
    return 0


async def _is_remote_dir(client: Client, where: Remote) -> bool:
    """Whether a directory is at the workspace path (the copy then lands inside it)."""
    try:
        await client.call(
            "file_list", {"workspace_id": where.workspace_id, "path": where.path, "max_entries": 1}
        )
    except (NotFoundError, ConflictError, InvalidArgumentError):
        return False
    return True


async def _download(
    client: Client, out: Output, source: Remote, dest: Path, overwrite: bool
) -> int:
    if dest.is_dir() and not dest.is_symlink():
        name = source.path.rstrip("/").rsplit("/", 1)[-1] or "workspace"
        dest = dest / name
    _check_free(dest, overwrite)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        archive = staging / "download"
        async with client.download(source.workspace_id, source.path) as download:
            with (
                out.bytes_bar(f"receiving {dest.name}", download.length) as advance,
                archive.open("wb") as sink,
            ):
                async for chunk in download.chunks:
                    sink.write(chunk)
                    advance(len(chunk))
            kind = download.kind
        if kind == "dir":
            tree = staging / "tree"
            entries, size = _unpack(archive, tree)
            _place(tree, dest, overwrite)
        else:
            entries, size = 1, archive.stat().st_size
            _place(archive, dest, overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    landed = {"kind": kind, "entries": entries, "bytes": size}
    document = {"source": str(source), "destination": str(dest), **landed}
    out.result(document, _copied(source, str(dest), landed))
    return 0


def _check_free(dest: Path, overwrite: bool) -> None:
    if not dest.parent.is_dir():
        raise NotFoundError(f"{dest.parent}: no such directory here")
    if (dest.exists() or dest.is_symlink()) and not overwrite:
        raise ConflictError(f"{dest} exists: pass --overwrite to replace it")


def _unpack(archive: Path, tree: Path) -> tuple[int, int]:
    """The tar unpacked into `tree` (made here) under the `data` filter; its entries and bytes."""
    tree.mkdir()
    entries = size = 0
    try:
        with tarfile.open(archive, "r:") as tar:
            for member in tar:
                entries += 1
                size += member.size if member.isfile() else 0
                tar.extract(member, tree, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise InvalidArgumentError(f"the downloaded tree was refused: {exc}") from None
    return entries, size


def _place(staged: Path, dest: Path, overwrite: bool) -> None:
    """`staged` moved to `dest`, replacing what is there only with `overwrite`."""
    if not (dest.exists() or dest.is_symlink()):
        os.rename(staged, dest)
        return
    _check_free(dest, overwrite)
    if dest.is_dir() and not dest.is_symlink():
        # A directory cannot be renamed over: moved aside, then removed once the copy is in.
        aside = dest.with_name(f".{dest.name}.replaced-{secrets.token_hex(4)}")
        os.rename(dest, aside)
        os.rename(staged, dest)
        shutil.rmtree(aside, ignore_errors=True)
    elif staged.is_dir():
        dest.unlink()
        os.rename(staged, dest)
    else:
        os.replace(staged, dest)


def _copied(source: object, dest: str, landed: dict[str, Any]) -> str:
    count = landed.get("entries", 1)
    what = "1 file" if landed.get("kind") == "file" else f"a tree of {count} entries"
    return f"copied {source} -> {dest} ({what}, {landed.get('bytes', 0)} bytes)"


async def _counted(
    chunks: AsyncIterator[bytes], advance: Callable[[int], None]
) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        advance(len(chunk))
        yield chunk
