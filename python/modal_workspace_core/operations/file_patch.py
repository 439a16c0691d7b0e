"""Multi-file patches: a unified diff or an `apply_patch` envelope applied all or nothing.

The core parses the patch and checks every path it names (and every move target) before
anything reaches the workspace; the agent applies it inside the workspace, with the workspace's
rights, and writes nothing unless every hunk of every file applied (`agent::files::patch`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from .. import policy
from ..errors import (
    ConflictError,
    InvalidArgumentError,
    LimitError,
    NotFoundError,
    PermissionDeniedError,
    core_refusal,
    naming,
)
from ..policy import WORKSPACE_ROOT
from .machinery.fields import Input, Open, Output, WorkspaceId
from .machinery.table import WS, Declarations, Hints

if TYPE_CHECKING:
    from ..runtime.service import Service

declare = Declarations()

# A patch may delete and replace files (destructive), and applying it twice is not applying it
# once; it stays within the workspace.
PATCHES = Hints(read_only=False, destructive=True, idempotent=False, open_world=False)

PatchFormat = Literal["unified", "apply_patch"]


class FilePatch(Input):
    workspace_id: WorkspaceId
    patch: str = Field(
        min_length=1,
        max_length=policy.MAX_PATCH_BYTES,
        description="A unified diff or an apply_patch envelope.",
    )
    format: PatchFormat | None = Field(None, description="Default: detected.")


class PatchedFile(Open):
    path: str = Field(description="The file, under the workspace root.")
    action: Literal["added", "updated", "deleted", "moved"] = Field(
        description="What the patch did to it."
    )
    to: str | None = Field(default=None, description="Where a moved file went.")
    hunks: int = Field(description="How many hunks applied.")
    lines_added: int = Field(description="Lines the patch added.")
    lines_removed: int = Field(description="Lines the patch removed.")


class FilePatchResult(Output):
    format: PatchFormat = Field(description="The patch's format, as read.")
    files: list[PatchedFile] = Field(description="Each file the patch named, in its order.")


def check_patch(patch: str, format: PatchFormat | None, root: str) -> PatchFormat:
    """The patch's format, once the core has parsed it and accepted every path under `root`."""
    with core_refusal("patch"):
        return policy.check_patch(patch, format, root)


@declare(
    method="POST",
    path=WS + "/files/patch",
    hints=PATCHES,
    summary=(
        "Patch files atomically: a unified diff or an apply_patch envelope (add, update, move, "
        "delete)."
    ),
    limits="A hunk that does not apply changes nothing.",
    in_actions=False,
)
async def file_patch(svc: Service, inp: FilePatch) -> FilePatchResult:
    try:
        fmt = check_patch(inp.patch, inp.format, WORKSPACE_ROOT)
    except InvalidArgumentError:
        # An absolute path may name the root an unisolated workspace reports (see path_view).
        root = await svc.root(inp.workspace_id)
        if root == WORKSPACE_ROOT:
            raise
        fmt = check_patch(inp.patch, inp.format, root)
    args = {"format": fmt}
    kinds = (NotFoundError, ConflictError, PermissionDeniedError, InvalidArgumentError, LimitError)
    with naming("patch", *kinds):
        result, _ = await svc.request(inp.workspace_id, "file.patch", args, inp.patch.encode())
    return FilePatchResult.model_validate({"format": fmt, "files": [], **result})
