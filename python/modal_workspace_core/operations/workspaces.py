"""Workspaces: create (idempotently), list, get and terminate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from .. import policy
from ..drivers.base import WorkspaceRecord, WorkspaceSecrets, WorkspaceSpec
from .fields import (
    Env,
    IdempotencyKey,
    Input,
    Output,
    Tags,
    WorkspaceId,
)
from .table import DESTROY, READ, WRITE, WS, Declarations

if TYPE_CHECKING:
    from ..service import Service

declare = Declarations()


# --- inputs --------------------------------------------------------------------------------------


class Resources(Input):
    cpu: float | None = Field(None, gt=0, le=64, description="CPU cores requested.")
    memory_mb: int | None = Field(None, ge=128, le=262_144, description="Memory in MiB.")
    gpu: str | None = Field(
        None, pattern=r"^[A-Za-z0-9:._-]{1,32}$", description="GPU type (Modal)."
    )
    timeout_seconds: int | None = Field(None, ge=60, le=86_400, description="Lifetime limit.")
    idle_timeout_seconds: int | None = Field(None, ge=60, le=86_400, description="Idle limit.")


class WorkspaceCreate(Input):
    resources: Resources = Field(
        default_factory=lambda: Resources.model_validate({}),
        description="What the workspace may use; values the driver cannot enforce are refused.",
    )
    env: Env = Field(default_factory=dict, description="Environment for every command.")
    secret_names: list[str] = Field(
        default_factory=list, max_length=16, description="Allowlisted secrets to expose as env."
    )
    volumes: dict[str, str] = Field(
        default_factory=dict, description="Mount path -> allowlisted volume name (Modal)."
    )
    tags: Tags = Field(default_factory=dict, description="Your labels; managed tags are refused.")
    block_network: bool = Field(False, description="Run with no network access.")
    idempotency_key: IdempotencyKey | None = Field(
        None, description="The same key returns the same workspace instead of a second one."
    )


class WorkspaceList(Input):
    pass


class WorkspaceRef(Input):
    workspace_id: WorkspaceId


# --- outputs -------------------------------------------------------------------------------------


class Workspace(Output):
    workspace_id: str = Field(description="The workspace's id.")
    driver: str = Field(description="Where it runs: local or modal.")
    root: str = Field(description="The workspace root as commands see it.")
    created_at: str = Field(description="When it was created (RFC 3339, UTC).")
    tags: dict[str, str] = Field(description="Your tags and the managed ones.")
    state: Literal["running", "stopped", "terminated"] = Field(
        description="running, stopped or terminated."
    )
    resources: dict[str, Any] = Field(default={}, description="The resources it was created with.")
    block_network: bool = Field(default=False, description="It has no network access.")


class WorkspaceListResult(Output):
    workspaces: list[Workspace] = Field(description="The running workspaces, newest first.")
    truncated: bool = Field(
        default=False, description="Only the first entries fitted the response."
    )


class TerminateResult(Output):
    workspace_id: str = Field(description="The workspace terminated.")
    terminated: bool = Field(description="It is terminated now.")


# --- operations ----------------------------------------------------------------------------------


def _out(record: WorkspaceRecord) -> Workspace:
    return Workspace.model_validate(record.model_dump())


@declare(
    method="POST",
    path="/workspaces",
    hints=WRITE,
    summary="Create a workspace: a durable machine with its root at /workspace. The same "
    "idempotency_key returns the same workspace.",
    limits="Managed tags (managed-by, workspace-id, workspace-root, repo-*) cannot be set; secrets"
    " and volumes must be allowlisted.",
)
async def workspace_create(svc: Service, inp: WorkspaceCreate) -> Workspace:
    # Everything that can refuse the request is checked before the driver is called.
    secrets = svc.workspace_secrets(inp.secret_names)
    volumes = svc.volumes(inp.volumes)
    resources = inp.resources.model_dump(exclude_none=True)
    if volumes:
        resources["volumes"] = volumes
    tags = dict(inp.tags)
    key = inp.idempotency_key
    if key is None:
        return _out(await _create(svc, tags, inp, resources, secrets))
    tags[policy.IDEMPOTENCY_TAG] = key
    # The key lives in the workspace's own tags, so it holds across gateway restarts; the lock
    # closes the window between looking and creating within this gateway.
    async with svc.create_lock:
        for record in await svc.driver.list():
            if record.tags.get(policy.IDEMPOTENCY_TAG) == key and record.state != "terminated":
                return _out(record)
        return _out(await _create(svc, tags, inp, resources, secrets))


async def _create(
    svc: Service,
    tags: dict[str, str],
    inp: WorkspaceCreate,
    resources: dict[str, object],
    secrets: WorkspaceSecrets,
) -> WorkspaceRecord:
    spec = WorkspaceSpec(
        env=inp.env,
        tags=tags,
        block_network=inp.block_network,
        resources=resources,
        **secrets.model_dump(),
    )
    return await svc.driver.create(policy.new_id("ws"), spec)


@declare(method="GET", path="/workspaces", hints=READ, summary="List the workspaces.")
async def workspace_list(svc: Service, inp: WorkspaceList) -> WorkspaceListResult:
    records = await svc.driver.list()
    return WorkspaceListResult(workspaces=[_out(r) for r in records if r.state != "terminated"])


@declare(
    method="GET",
    path=WS,
    hints=READ,
    summary="Get one workspace: its state, root, tags and resources.",
)
async def workspace_get(svc: Service, inp: WorkspaceRef) -> Workspace:
    return _out(await svc.record(inp.workspace_id))


@declare(
    method="DELETE",
    path=WS,
    hints=DESTROY,
    summary="Terminate a workspace and everything running in it.",
)
async def workspace_terminate(svc: Service, inp: WorkspaceRef) -> TerminateResult:
    await svc.record(inp.workspace_id)  # a missing workspace is a 404, not a silent success
    await svc.drop_agent(inp.workspace_id)
    await svc.driver.destroy(inp.workspace_id)
    return TerminateResult(workspace_id=inp.workspace_id, terminated=True)
