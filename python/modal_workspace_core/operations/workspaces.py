"""Workspaces: create (idempotently), list, get and terminate."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, Field

from .. import policy
from ..drivers.base import (
    LifecycleNote,
    Lineage,
    Suspension,
    WorkspaceRecord,
    WorkspaceSecrets,
    WorkspaceSpec,
)
from ..errors import InvalidArgumentError
from .fields import (
    Env,
    IdempotencyKey,
    Input,
    Output,
    Tags,
    WorkspaceId,
)
from .lifecycle import take_snapshot
from .table import DESTROY, READ, WRITE, WS, Declarations

if TYPE_CHECKING:
    from ..service import Service

declare = Declarations()


# --- inputs --------------------------------------------------------------------------------------


ImageName = Annotated[str, AfterValidator(policy.image_name)]
ImageId = Annotated[str, AfterValidator(policy.image_id)]
AptPackages = Annotated[
    list[str],
    Field(max_length=policy.MAX_IMAGE_PACKAGES),
    AfterValidator(lambda items: policy.image_packages("apt", items)),
]
PipPackages = Annotated[
    list[str],
    Field(max_length=policy.MAX_IMAGE_PACKAGES),
    AfterValidator(lambda items: policy.image_packages("pip", items)),
]


class Resources(Input):
    cpu: float | None = Field(None, gt=0, le=64, description="CPU cores requested.")
    memory_mb: int | None = Field(None, ge=128, le=262_144, description="Memory in MiB.")
    gpu: str | None = Field(
        None, pattern=r"^[A-Za-z0-9:._-]{1,32}$", description="GPU type (Modal)."
    )
    timeout_seconds: int | None = Field(None, ge=5, le=86_400, description="Lifetime limit.")
    idle_timeout_seconds: int | None = Field(None, ge=5, le=86_400, description="Idle limit.")
    # -- the image (Modal): which one, and packages layered on top of it ---------------------
    image_name: ImageName | None = Field(
        None, description="A published Modal image to start from (NAME or NAME:TAG)."
    )
    image_id: ImageId | None = Field(None, description="A Modal image id (im-…) to start from.")
    apt_packages: AptPackages | None = Field(
        None,
        description="Debian packages to add (NAME or NAME=VERSION), built as a cached layer.",
    )
    pip_packages: PipPackages | None = Field(
        None,
        description="Python packages to add (NAME or NAME==VERSION), built as a cached layer.",
    )


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


class WorkspaceTerminate(Input):
    workspace_id: WorkspaceId
    keep_snapshot: bool | None = Field(
        None,
        description="Snapshot it first and keep its snapshots, so it can be resumed; default: "
        "yes on Modal, no on the local driver.",
    )
    purge: bool = Field(False, description="Delete everything, its snapshots included.")


# --- outputs -------------------------------------------------------------------------------------


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


class WorkspaceListResult(Output):
    workspaces: list[Workspace] = Field(description="The running workspaces, newest first.")
    truncated: bool = Field(
        default=False, description="Only the first entries fitted the response."
    )


class TerminateResult(Output):
    workspace_id: str = Field(description="The workspace terminated.")
    terminated: bool = Field(description="It is terminated now.")
    snapshot_id: str | None = Field(
        default=None, description="The snapshot kept of it: resume it from this one."
    )


# --- operations ----------------------------------------------------------------------------------


def workspace_out(record: WorkspaceRecord, *, resumed_from: str | None = None) -> Workspace:
    return Workspace.model_validate({**record.model_dump(), "resumed_from": resumed_from})


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
        return workspace_out(await _create(svc, tags, inp, resources, secrets))
    tags[policy.IDEMPOTENCY_TAG] = key
    return workspace_out(
        await once_per_key(svc, key, lambda: _create(svc, tags, inp, resources, secrets))
    )


async def once_per_key(
    svc: Service, key: str, make: Callable[[], Awaitable[WorkspaceRecord]]
) -> WorkspaceRecord:
    """The live workspace whose idempotency tag is `key`, else the one `make` creates (and
    tags with it). The key lives in the workspace's own tags, so it holds across gateway
    restarts; the lock closes the window between looking and creating within this gateway."""
    async with svc.create_lock:
        for record in await svc.driver.list():
            if record.tags.get(policy.IDEMPOTENCY_TAG) == key and record.state != "terminated":
                return record
        return await make()


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
    return WorkspaceListResult(
        workspaces=[workspace_out(r) for r in records if r.state != "terminated"]
    )


@declare(
    method="GET",
    path=WS,
    hints=READ,
    summary="Get one workspace: its state, root, tags and resources.",
)
async def workspace_get(svc: Service, inp: WorkspaceRef) -> Workspace:
    return workspace_out(await svc.record(inp.workspace_id))


@declare(
    method="DELETE",
    path=WS,
    hints=DESTROY,
    summary="Terminate a workspace and everything running in it; keep_snapshot keeps it "
    "resumable, purge deletes its snapshots too.",
)
async def workspace_terminate(svc: Service, inp: WorkspaceTerminate) -> TerminateResult:
    ws = inp.workspace_id
    record = await svc.record(ws)  # a missing workspace is a 404, not a silent success
    keep = inp.keep_snapshot
    if keep is None:
        keep = svc.driver.keeps_snapshots and not inp.purge
    if keep and inp.purge:
        raise InvalidArgumentError(
            "keep_snapshot and purge contradict each other: choose one", field="purge"
        )
    snapshot_id = None
    if keep and record.state != "suspended":
        snapshot_id = (await take_snapshot(svc, ws, "exit", label="terminate")).snapshot_id
    elif keep and record.suspension is not None:
        snapshot_id = record.suspension.snapshot_id
    await svc.drop_agent(ws)
    # Kept unless purged: a workspace that has snapshots can still be resumed from them.
    kept = not inp.purge and (keep or await _has_snapshots(svc, ws))
    await svc.driver.destroy(ws, keep_snapshots=kept)
    return TerminateResult(workspace_id=ws, terminated=True, snapshot_id=snapshot_id)


async def _has_snapshots(svc: Service, workspace_id: str) -> bool:
    return bool(await svc.driver.list_snapshots(workspace_id))
