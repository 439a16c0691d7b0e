"""`SharedStore` on Modal: a Volume (v2) written record by record through the SDK's file API,
never mounted. Each record is one file; every call goes to Modal's service, so a write one
gateway container made is what the next read of any other container sees (no commit, no reload,
no cache to go stale), and the store outlives every container and every sandbox.

Why a Volume: Modal documents a Volume as persistent storage kept until it is deleted, where a
Dict's entries expire after seven days unused and a Queue's sooner; sandbox tags live on
sandboxes, which Modal lists for an undocumented while after they end. `create` is an upload
without `force`, which Modal refuses for a path that exists (`batch_upload`'s documented
behaviour): the one atomic step the OAuth server's single-use codes and refresh tokens build on
(docs/modal.md says which of this Modal documents).
"""

from __future__ import annotations

import asyncio
import contextlib
import io

import modal
from modal_proto import api_pb2

from ...shared_store import check_folder, check_key

__all__ = ["VolumeStore"]


class VolumeStore:
    """`SharedStore` over the Volume named `name` (made at first use when missing)."""

    def __init__(self, name: str, *, environment: str | None = None) -> None:
        self.name = name
        self.environment = environment
        self._volume: modal.Volume | None = None
        self._lock = asyncio.Lock()

    async def _opened(self) -> modal.Volume:
        if self._volume is None:
            async with self._lock:
                if self._volume is None:
                    volume = modal.Volume.from_name(
                        self.name,
                        environment_name=self.environment,
                        create_if_missing=True,
                        # v2: files written from many containers at once, each on its own.
                        version=api_pb2.VOLUME_FS_VERSION_V2,
                    )
                    await volume.hydrate.aio()
                    self._volume = volume
        return self._volume

    async def read(self, key: str) -> bytes | None:
        volume = await self._opened()
        try:
            return b"".join([chunk async for chunk in volume.read_file.aio(check_key(key))])
        except FileNotFoundError:
            return None

    async def _upload(self, key: str, value: bytes, *, force: bool) -> None:
        volume = await self._opened()
        async with volume.batch_upload.aio(force=force) as batch:
            batch.put_file(io.BytesIO(value), check_key(key))

    async def write(self, key: str, value: bytes) -> None:
        await self._upload(key, value, force=True)

    async def create(self, key: str, value: bytes) -> bool:
        try:
            await self._upload(key, value, force=False)
        except FileExistsError:
            return False
        return True

    async def remove(self, key: str) -> None:
        volume = await self._opened()
        with contextlib.suppress(FileNotFoundError):
            await volume.remove_file.aio(check_key(key), recursive=True)

    async def names(self, folder: str) -> list[str]:
        volume = await self._opened()
        try:
            entries = await volume.listdir.aio(check_folder(folder))
        except (FileNotFoundError, modal.exception.NotFoundError):
            return []
        return sorted(entry.path.rstrip("/").rsplit("/", 1)[-1] for entry in entries)
