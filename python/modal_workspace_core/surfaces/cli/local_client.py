"""The commands' client in process: the operations run here, on this machine's driver and data
root, through the Python API (`Workspaces`), as `modal-workspace serve` would run them. A
workspace outlives the command that made it (its agent is a daemon of its own), so the next
command, in process or through a server on the same data root, finds it.

Answers are the operations' models as JSON, as REST would send them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, Literal, cast

from pydantic import BaseModel

from ...config import Settings
from ...operations import artifact_transfer as transfer
from ...operations import operation, parse_request
from ...operations.artifacts import ArtifactDownload, ArtifactUpload, upload
from ...path_view import shown
from ...runtime.service import Service
from ..python_client import Workspaces
from .contract import Download

__all__ = ["LocalClient"]


class LocalClient:
    """`Client` in process: use it as `async with LocalClient(settings) as client:`."""

    def __init__(self, settings: Settings) -> None:
        self.where = f"in process (data root {settings.data_root})"
        self._workspaces = Workspaces(settings=settings)

    async def __aenter__(self) -> LocalClient:
        await self._workspaces.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # It terminates only workspaces it created through `Workspaces.create`: none (every
        # create here is a call, and a command's workspace is there for the next command).
        await self._workspaces.__aexit__(exc_type, exc, tb)

    async def call(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        return _json(await self._workspaces.call(name, **args))

    async def upload(
        self, workspace_id: str, path: str, body: transfer.LocalBody, *, overwrite: bool
    ) -> dict[str, Any]:
        svc = self._workspaces.service
        args = {"workspace_id": workspace_id, "path": path, "overwrite": overwrite}
        inp = cast(ArtifactUpload, await parse_request(svc, operation("artifact_upload"), args))
        try:
            result = await upload(svc, inp, body.chunks, body.format)
        except Exception as exc:
            raise svc.caller_error(exc) from None
        return _json(shown(result, await svc.root(workspace_id)))

    @contextlib.asynccontextmanager
    async def download(self, workspace_id: str, path: str) -> AsyncIterator[Download]:
        svc = self._workspaces.service
        args = {"workspace_id": workspace_id, "path": path}
        inp = await parse_request(svc, operation("artifact_download"), args)
        try:
            reply = await transfer.download(svc, workspace_id, cast(ArtifactDownload, inp).path)
        except Exception as exc:
            raise svc.caller_error(exc) from None
        try:
            kind: Literal["file", "dir"] = (
                "dir" if reply.media_type == "application/x-tar" else "file"
            )
            yield Download(kind, reply.length, _errors_named(svc, reply.chunks))
        finally:
            if reply.close is not None:
                await reply.close()


async def _errors_named(svc: Service, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The chunks, a failure on the way becoming the error a caller sees."""
    try:
        async for chunk in chunks:
            yield chunk
    except Exception as exc:
        raise svc.caller_error(exc) from None


def _json(model: BaseModel) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(model.model_dump_json())
    return answer
