"""Volumes (VolumeFS v2) as the test control plane serves them: `VolumeGetOrCreate`,
`VolumeDelete`, and the remote file API the SDK's `Volume.read_file`, `batch_upload`, `listdir`
and `remove_file` use (`VolumeGetFile2`, `VolumePutFiles2`, `VolumeListFiles2`,
`VolumeRemoveFile2`). Block bytes move over HTTP (`blocks`). A mixin of the `ModalClient`
servicer.

Each call's check and change run without yielding to the event loop, so a call is atomic against
every other: of two exclusive puts of one path exactly one wins, and a refused put writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf import empty_pb2
from grpclib import GRPCError, Status
from modal_proto import api_pb2

from .objects import request_of
from .volume_store import (
    BLOCK_SIZE,
    VolumeFile,
    VolumeRecord,
    ancestors,
    block_count,
    block_length,
    normalise,
    now,
    parent_of,
)

if TYPE_CHECKING:
    from .state import State

__all__ = ["VolumesServicer"]

_CREATE_IF_MISSING = api_pb2.OBJECT_CREATION_TYPE_CREATE_IF_MISSING
_CREATE_FAIL_IF_EXISTS = api_pb2.OBJECT_CREATION_TYPE_CREATE_FAIL_IF_EXISTS
_LOOKUP = api_pb2.OBJECT_CREATION_TYPE_UNSPECIFIED
_FILE = api_pb2.FileEntry.FileType.FILE
_DIRECTORY = api_pb2.FileEntry.FileType.DIRECTORY
# How many entries one VolumeListFiles2 message carries.
LIST_BATCH_SIZE = 100
_DEFAULT_MODE = 0o644


def _invalid(message: str) -> GRPCError:
    return GRPCError(Status.INVALID_ARGUMENT, message)


class VolumesServicer:
    state: State

    async def VolumeGetOrCreate(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        volumes = self.state.volumes
        name = request.deployment_name
        record = volumes.named(name)
        if request.object_creation_type == _CREATE_FAIL_IF_EXISTS and record is not None:
            raise GRPCError(Status.ALREADY_EXISTS, f"Volume '{name}' already exists")
        if record is None:
            if request.object_creation_type not in (_CREATE_IF_MISSING, _CREATE_FAIL_IF_EXISTS):
                if request.object_creation_type != _LOOKUP:
                    raise GRPCError(Status.UNIMPLEMENTED, "ephemeral and app-owned volumes")
                raise GRPCError(Status.NOT_FOUND, f"Volume '{name}' not found")
            record = volumes.create(name)
        record.requested_versions.append(request.version)
        # Every volume here is VolumeFS v2: a request for v1 gets a v2 volume, which the SDK
        # refuses ("exists but has version v2"), as it would refuse an existing v2 volume.
        metadata = api_pb2.VolumeMetadata(
            name=name,
            version=api_pb2.VOLUME_FS_VERSION_V2,
            creation_info=api_pb2.CreationInfo(created_by="test"),
        )
        await stream.send_message(
            api_pb2.VolumeGetOrCreateResponse(
                volume_id=record.volume_id, version=api_pb2.VOLUME_FS_VERSION_V2, metadata=metadata
            )
        )

    async def VolumeDelete(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        self.state.volumes.delete(request.volume_id)
        await stream.send_message(empty_pb2.Empty())

    # -- the remote file API ---------------------------------------------------------------

    async def VolumeGetFile2(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        volumes = self.state.volumes
        record = volumes.get(request.volume_id)
        path = normalise(request.path)
        file = record.files.get(path)
        if file is None:
            what = "is a directory" if record.kind(path) == "dir" else "not found"
            raise GRPCError(Status.NOT_FOUND, f"{request.path}: {what}")
        start = min(request.start, file.size)
        end = file.size if request.len == 0 else min(file.size, start + request.len)
        urls = []
        if end > start:
            for index in range(start // BLOCK_SIZE, (end - 1) // BLOCK_SIZE + 1):
                block_start = index * BLOCK_SIZE
                offset = max(start, block_start) - block_start
                length = min(end, block_start + BLOCK_SIZE) - block_start - offset
                urls.append(
                    volumes.get_url(
                        file.blocks[index], offset, length, pad=not request.client_pads_blocks
                    )
                )
        await stream.send_message(
            api_pb2.VolumeGetFile2Response(
                get_urls=urls, size=file.size, start=start, len=end - start
            )
        )

    async def VolumePutFiles2(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        volumes = self.state.volumes
        record = volumes.get(request.volume_id)
        # The files apply to a copy of the tree, one after the other, which replaces the volume's
        # only when every file fits and every block is here: a refused put writes nothing.
        staged = _Staged(dict(record.files), dict(record.dirs), now())
        missing: list[api_pb2.VolumePutFiles2Response.MissingBlock] = []
        for file_index, put in enumerate(request.files):
            path = normalise(put.path)
            staged.check_place(put.path, path, exclusive=request.disallow_overwrite_existing_files)
            if len(put.blocks) != block_count(put.size):
                raise _invalid(
                    f"{put.path}: {len(put.blocks)} blocks for {put.size} bytes "
                    f"(blocks are {BLOCK_SIZE} bytes)"
                )
            for block_index, block in enumerate(put.blocks):
                if not self._block_here(put, block_index, block):
                    missing.append(
                        api_pb2.VolumePutFiles2Response.MissingBlock(
                            file_index=file_index,
                            block_index=block_index,
                            put_url=volumes.put_url(block.contents_sha256),
                        )
                    )
            mode = put.mode if put.HasField("mode") else _DEFAULT_MODE
            digests = tuple(block.contents_sha256 for block in put.blocks)
            staged.place(path, VolumeFile(digests, put.size, mode, staged.mtime))
        if not missing:
            record.files, record.dirs = staged.files, staged.dirs
        await stream.send_message(api_pb2.VolumePutFiles2Response(missing_blocks=missing))

    def _block_here(self, put: api_pb2.VolumePutFiles2Request.File, index: int, block: Any) -> bool:
        """Whether the block is stored (uploaded before, or just now with the receipt the SDK
        hands back as `put_response`); a block that does not fit the file is refused."""
        volumes = self.state.volumes
        digest = block.contents_sha256
        if len(digest) != 32:
            raise _invalid(f"{put.path}: block {index} has no sha256 digest")
        if block.HasField("put_response") and block.put_response != volumes.receipt(digest):
            raise _invalid(f"{put.path}: block {index}: not this block's put_response")
        data = volumes.blocks.get(digest)
        if data is not None and len(data) > block_length(put.size, index):
            raise _invalid(f"{put.path}: block {index} is longer than the file has room for")
        return data is not None

    async def VolumeListFiles2(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        record = self.state.volumes.get(request.volume_id)
        path = normalise(request.path)
        kind = record.kind(path)
        if kind is None:
            raise GRPCError(Status.NOT_FOUND, f"{request.path}: no such file or directory")
        entries = (
            [_entry(record, path)] if kind == "file" else _listing(record, path, request.recursive)
        )
        if request.max_entries:
            entries = entries[: request.max_entries]
        for first in range(0, len(entries), LIST_BATCH_SIZE):
            batch = entries[first : first + LIST_BATCH_SIZE]
            await stream.send_message(api_pb2.VolumeListFiles2Response(entries=batch))

    async def VolumeRemoveFile2(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        record = self.state.volumes.get(request.volume_id)
        path = normalise(request.path)
        kind = record.kind(path)
        if not path:
            raise _invalid("the volume's root cannot be removed")
        if kind is None:
            raise GRPCError(Status.NOT_FOUND, f"{request.path}: no such file or directory")
        if kind == "dir":
            if not request.recursive:
                raise _invalid(f"{request.path}: is a directory (remove it with recursive=True)")
            prefix = path + "/"
            record.files = {p: f for p, f in record.files.items() if not p.startswith(prefix)}
            record.dirs = {
                d: t for d, t in record.dirs.items() if d != path and not d.startswith(prefix)
            }
        else:
            del record.files[path]
        record.touch(parent_of(path), now())
        await stream.send_message(empty_pb2.Empty())


@dataclass
class _Staged:
    """A volume's tree while a put applies to it."""

    files: dict[str, VolumeFile]
    dirs: dict[str, int]
    mtime: int

    def check_place(self, given: str, path: str, *, exclusive: bool) -> None:
        if not path:
            raise _invalid(f"{given!r} is not a file path")
        for directory in ancestors(path):
            if directory in self.files:
                raise _invalid(f"{given}: {directory} is a file, not a directory")
        if path in self.dirs:
            raise GRPCError(Status.ALREADY_EXISTS, f"{given}: is a directory")
        if exclusive and path in self.files:
            raise GRPCError(
                Status.ALREADY_EXISTS,
                f"{given}: already exists (disallow_overwrite_existing_files=True)",
            )

    def place(self, path: str, file: VolumeFile) -> None:
        """The file at `path`, its parent directories made; each directory that gains an entry
        gets the put's mtime."""
        for directory in ancestors(path):
            if directory not in self.dirs:
                self.dirs[directory] = self.mtime
                if parent_of(directory) in self.dirs:
                    self.dirs[parent_of(directory)] = self.mtime
        if path not in self.files and parent_of(path) in self.dirs:
            self.dirs[parent_of(path)] = self.mtime
        self.files[path] = file


def _entry(record: VolumeRecord, path: str) -> api_pb2.FileEntry:
    file = record.files.get(path)
    if file is None:
        return api_pb2.FileEntry(path=path, type=_DIRECTORY, mtime=record.dirs[path], size=0)
    return api_pb2.FileEntry(path=path, type=_FILE, mtime=file.mtime, size=file.size)


def _listing(record: VolumeRecord, directory: str, recursive: bool) -> list[api_pb2.FileEntry]:
    """The entries under `directory` (directly under it, or at any depth), by path; each entry's
    path is its full path from the volume's root."""
    prefix = directory + "/" if directory else ""

    def under(path: str) -> bool:
        return path.startswith(prefix) and (recursive or "/" not in path[len(prefix) :])

    paths = sorted(p for p in [*record.dirs, *record.files] if under(p))
    return [_entry(record, p) for p in paths]
