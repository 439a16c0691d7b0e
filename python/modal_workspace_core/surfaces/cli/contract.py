"""What the commands ask of a gateway, in one small interface with two implementations: REST
against a server (`rest_client`, when a URL is configured) and the operations in process on
this machine's driver (`local_client`, over the Python API's `Workspaces`). The commands know
only this interface: every operation is reached by its name in the table, with its fields.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    # Annotations only: the command line imports this module before it knows it needs a client
    # (`--help` and shell completion load none of the operations).
    from ...operations.artifact_transfer import LocalBody

__all__ = ["Client", "Download", "Target"]


@dataclass(frozen=True)
class Target:
    """Where the commands go, as the command line says (None: as the environment says)."""

    url: str | None = None
    token_file: Path | None = None
    data_root: Path | None = None


@dataclass(frozen=True)
class Download:
    """A download's bytes as they arrive: a file's, or a directory's tree as a tar."""

    kind: Literal["file", "dir"]
    length: int
    chunks: AsyncIterator[bytes]


class Client(Protocol):
    # Where the commands go, for people: the gateway's URL, or the local data root.
    where: str

    async def call(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """The operation `name` with `args` (its fields): its answer as REST's JSON says it.
        Raises `WorkspaceError` as the operation does."""
        ...

    async def upload(
        self, workspace_id: str, path: str, body: LocalBody, *, overwrite: bool
    ) -> dict[str, Any]:
        """`body` (a file's bytes, or a tree as a tar) landed at `path` all at once
        (`artifact_upload`)."""
        ...

    def download(
        self, workspace_id: str, path: str
    ) -> contextlib.AbstractAsyncContextManager[Download]:
        """`path`'s bytes, streamed (`artifact_download`)."""
        ...
