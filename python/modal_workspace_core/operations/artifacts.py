"""Artifacts: a file or a directory of a workspace downloaded (a directory as a tar) and
uploaded (a tar, or one file) atomically, contained like every file operation.

REST carries the bytes themselves (`RawRest`): a download streams with `Content-Length`, an
upload is the raw request body. Clients that take only text (GPT Actions, MCP) get a listing
with sizes and a short-lived signed `download_url` that needs no bearer token; MCP and the
Python API upload base64 content of a bounded size. See `artifact_transfer` for the agent steps.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from ..errors import ConflictError, InvalidArgumentError, NotFoundError, naming
from ..policy import WORKSPACE_ROOT
from . import artifact_transfer as transfer
from .machinery.fields import (
    MAX_FILE_BYTES,
    Input,
    Open,
    Output,
    Timestamp,
    WorkspaceId,
    WorkspacePath,
    decode_input,
)
from .machinery.fitting import KeepFirst
from .machinery.limits import Bound
from .machinery.table import READ, REWRITE, WS, Declarations, RawReply, RawRest

if TYPE_CHECKING:
    from ..runtime.service import Service

declare = Declarations()

TAR_TYPES = ("application/x-tar", "application/tar")
# The most characters a listing's entries take encoded as JSON, on every surface: within GPT
# Actions' 100 000 with room for the rest of the answer, and light for an MCP client.
LISTING_CHARS = 60_000


# --- inputs --------------------------------------------------------------------------------------


class ArtifactDownload(Input):
    workspace_id: WorkspaceId
    path: WorkspacePath = WORKSPACE_ROOT
    listing: bool = Field(
        default=False,
        description="REST: the listing, not the bytes (MCP always).",
    )
    max_entries: int = Field(200, ge=1, le=10_000, description="Listed; the totals count all.")


class ArtifactUpload(Input):
    workspace_id: WorkspaceId
    path: WorkspacePath
    format: Literal["tar", "file"] | None = Field(
        default=None,
        description="tar: unpacked into path; file: one file. Default: by Content-Type, else file.",
    )
    overwrite: bool = Field(default=False, description="Replace what is at path.")
    content: str = Field(
        default="",
        max_length=2 * MAX_FILE_BYTES,
        description="The bytes, base64 (REST: the raw body).",
    )


# --- outputs -------------------------------------------------------------------------------------


class ArtifactEntry(Open):
    path: str = Field(description="The entry, relative to the downloaded directory.")
    kind: str = Field(description="file, dir or symlink")
    size: int = Field(default=0, description="Size in bytes (files).")


class ArtifactListing(Output):
    path: str = Field(description="What is downloaded.")
    kind: Literal["file", "dir"] = Field(description="file: its bytes; dir: a tar of its tree.")
    size: int = Field(description="The files' bytes in total.")
    entries: int = Field(description="How many files, directories and symlinks.")
    listing: list[ArtifactEntry] = Field(description="Entries with sizes, sorted by path.")
    truncated: bool = Field(description="The listing names fewer entries than there are.")
    download_url: str | None = Field(
        default=None,
        description="GET it (no bearer token needed) for the bytes until expires_at.",
    )
    download_path: str | None = Field(
        default=None, description="The link's path on this gateway (for in-process callers)."
    )
    expires_at: Timestamp = Field(default=None, description="When the link stops working.")

    gives_less = (KeepFirst("listing"),)


class ArtifactUploadResult(Output):
    path: str = Field(description="Where the upload landed.")
    kind: Literal["file", "dir"] = Field(description="A file, or a directory from a tar.")
    entries: int = Field(description="Entries created.")
    bytes: int = Field(description="File bytes written.")
    replaced: bool = Field(description="Something was at path and was replaced (overwrite).")


# --- REST's byte forms ---------------------------------------------------------------------------


def _wants_json(headers: Mapping[str, str]) -> bool:
    """An `Accept` that names JSON and no type the bytes could be sent as."""
    accept = headers.get("accept", "").lower()
    binary = ("*/*", "application/*", "application/octet-stream", *TAR_TYPES)
    return "application/json" in accept and not any(t in accept for t in binary)


async def _download_bytes(
    svc: Service, inp: ArtifactDownload, body: AsyncIterator[bytes], headers: Mapping[str, str]
) -> RawReply | None:
    if inp.listing or _wants_json(headers):
        return None  # the declared handler's listing
    with naming("path", NotFoundError):
        return await transfer.download(svc, inp.workspace_id, inp.path)


async def _upload_bytes(
    svc: Service, inp: ArtifactUpload, body: AsyncIterator[bytes], headers: Mapping[str, str]
) -> BaseModel:
    if inp.content:
        raise InvalidArgumentError(
            "content: REST sends the bytes as the raw request body", field="content"
        )
    media = headers.get("content-type", "").split(";")[0].strip().lower()
    fmt = inp.format or ("tar" if media in TAR_TYPES else "file")
    return await upload(svc, inp, body, fmt)


# --- operations ----------------------------------------------------------------------------------


@declare(
    method="GET",
    path=WS + "/artifacts",
    hints=READ,
    summary="Download a file or a directory (a tar): a listing and a short-lived download_url.",
    limits="GET download_url (no token) before expires_at. REST without listing=true streams "
    "the bytes.",
    bounds={"actions": {"max_entries": Bound(1000)}},
    raw=RawRest(
        serve=_download_bytes,
        response_media=("application/x-tar", "application/octet-stream"),
        text_field="listing",
    ),
)
async def artifact_download(svc: Service, inp: ArtifactDownload) -> ArtifactListing:
    with naming("path", NotFoundError):
        _, summary = await transfer.pack(
            svc, inp.workspace_id, inp.path, dry_run=True, list_max=inp.max_entries
        )
    link = transfer.mint_link(svc, inp.workspace_id, inp.path)
    listed, cut = _within(summary.get("listing") or [], LISTING_CHARS)
    return ArtifactListing(
        path=inp.path,
        kind="file" if summary.get("kind") == "file" else "dir",
        size=int(summary.get("bytes", 0)),
        entries=int(summary.get("entries", 0)),
        listing=[ArtifactEntry.model_validate(e) for e in listed],
        truncated=cut or bool(summary.get("truncated")),
        download_url=transfer.link_url(link[0]) if link else None,
        download_path=link[0] if link else None,
        expires_at=link[1] if link else None,  # type: ignore[arg-type]  # made a timestamp
    )


@declare(
    method="PUT",
    path=WS + "/artifacts",
    hints=REWRITE,
    summary="Upload a tar or one file, atomically: all of it lands or nothing.",
    limits="At most the gateway's artifact bound.",
    in_actions=False,
    raw=RawRest(
        serve=_upload_bytes,
        request_media=("application/x-tar", "application/octet-stream"),
    ),
)
async def artifact_upload(svc: Service, inp: ArtifactUpload) -> ArtifactUploadResult:
    payload = decode_input(inp.content, "base64", "content")

    async def body() -> AsyncIterator[bytes]:
        yield payload

    return await upload(svc, inp, body(), inp.format or "file")


def _within(entries: list[dict[str, Any]], most: int) -> tuple[list[dict[str, Any]], bool]:
    """The first entries whose JSON takes at most `most` characters, and whether any were cut."""
    used = 0
    for i, entry in enumerate(entries):
        used += len(json.dumps(entry, ensure_ascii=False)) + 1
        if used > most:
            return entries[:i], True
    return entries, False


async def upload(
    svc: Service, inp: ArtifactUpload, body: AsyncIterator[bytes], fmt: transfer.Format
) -> ArtifactUploadResult:
    """`body` (a tar, or one file's bytes) unpacked at `inp.path` all at once: what every
    surface's upload comes to."""
    if inp.path == WORKSPACE_ROOT:
        raise InvalidArgumentError(
            "path: name a path under the workspace root, not the root itself", field="path"
        )
    # Something already at path (and overwrite not given) is the conflict.
    with naming("path", ConflictError):
        outcome = await transfer.upload(
            svc, inp.workspace_id, inp.path, body, fmt=fmt, overwrite=inp.overwrite
        )
    return ArtifactUploadResult.model_validate({**outcome, "path": inp.path})
