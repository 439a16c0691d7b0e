"""A workspace as operations answer it (`Workspace`), and the one workspace an idempotency key
makes (`once_per_key`): shared by the workspaces domain (create, list, get) and the snapshots
domain (a resume answers a workspace; a fork is one, made once per key like a create)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ..drivers.base import LifecycleNote, Lineage, Suspension, WorkspaceRecord
from ..errors import ConflictError, NotFoundError
from .machinery.fields import Output, derived_id

if TYPE_CHECKING:
    from ..runtime.service import Service

__all__ = ["Workspace", "once_per_key", "workspace_out"]


class Workspace(Output):
    workspace_id: str = Field(description="The workspace's id.")
    driver: str = Field(description="Where it runs: local or modal.")
    root: str = Field(description="The workspace root as commands see it.")
    created_at: str = Field(description="When it was created (RFC 3339, UTC).")
    tags: dict[str, str] = Field(description="Your tags and the managed ones.")
    state: Literal["running", "stopped", "suspended", "terminated"] = Field(
        description="running, stopped (starts on next use), suspended (files in a snapshot, "
        "resumes on next use) or terminated."
    )
    resources: dict[str, Any] = Field(default={}, description="The resources it was created with.")
    block_network: bool = Field(default=False, description="It has no network access.")
    lineage: Lineage | None = Field(
        default=None, description="For a fork: its parent workspace, snapshot and git HEADs."
    )
    suspension: Suspension | None = Field(
        default=None, description="Why it is suspended, and the snapshot that holds its files."
    )
    started_at: str | None = Field(
        default=None, description="When it last started (created or resumed): its lifetime's start."
    )
    lifecycle: list[LifecycleNote] = Field(
        default=[], description="What the server's lifecycle did to it on its own, newest last."
    )


def workspace_out(record: WorkspaceRecord, *, resumed_from: str | None = None) -> Workspace:
    return Workspace.model_validate({**record.model_dump(), "resumed_from": resumed_from})


# How long a gateway that lost the race for a key waits for the winner's workspace to show.
_KEYED_WAIT_SECONDS = 10.0


async def once_per_key(
    svc: Service, scope: str, key: str, make: Callable[[str], Awaitable[WorkspaceRecord]]
) -> WorkspaceRecord:
    """The workspace the idempotency `key` names within `scope`, made by `make` (given its id)
    the first time. The key decides the id (`derived_id`), so the driver's own uniqueness of ids
    (a Modal sandbox's name, a data-root directory) settles a race between two gateways, or two
    requests of one: the loser finds the winner's workspace. The key names that one workspace
    for good: once it is terminated, the key is refused, not reused."""
    workspace_id = derived_id("ws", scope, key, svc.settings.idempotency_secret)
    found = await _keyed(svc, workspace_id)
    if found is not None:
        return found
    try:
        return await make(workspace_id)
    except ConflictError:
        # Another request made it first: its workspace shows as soon as it is recorded.
        deadline = time.monotonic() + _KEYED_WAIT_SECONDS
        while time.monotonic() < deadline:
            found = await _keyed(svc, workspace_id)
            if found is not None:
                return found
            await asyncio.sleep(0.2)
        raise


async def _keyed(svc: Service, workspace_id: str) -> WorkspaceRecord | None:
    try:
        record = await svc.driver.get(workspace_id)
    except NotFoundError:
        return None
    if record.state == "terminated":
        raise ConflictError(
            f"this idempotency key made workspace {workspace_id}, which was terminated: resume "
            "it (workspace_resume) or use another key",
            field="idempotency_key",
        )
    return record
