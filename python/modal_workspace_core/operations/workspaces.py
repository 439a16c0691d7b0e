"""Workspaces: create (idempotently), list, get and terminate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from .. import policy
from ..drivers.base import WorkspaceRecord, WorkspaceSecrets, WorkspaceSpec
from ..errors import InvalidArgumentError
from .lifecycle import take_snapshot
from .machinery.fields import Env, IdempotencyKey, Input, Output, Tags, WorkspaceId
from .machinery.fitting import KeepFirst
from .machinery.table import DESTROY, READ, WRITE, WS, Declarations
from .workspace_info import Workspace, once_per_key, workspace_out

if TYPE_CHECKING:
    from ..runtime.service import Service

declare = Declarations()


# --- inputs --------------------------------------------------------------------------------------


# Each entry of a region or allowlist through the core's rule (an error names `field.i`).
Region = Annotated[str, AfterValidator(policy.region)]
OutboundCidr = Annotated[str, AfterValidator(policy.outbound_cidr)]
OutboundDomain = Annotated[str, AfterValidator(policy.outbound_domain)]
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
    cpu: float | None = Field(
        None,
        ge=policy.MIN_CPU_CORES,
        le=policy.MAX_CPU_CORES,
        description="Cores reserved.",
    )
    memory_mb: int | None = Field(
        None,
        ge=policy.MIN_MEMORY_MIB,
        le=policy.MAX_MEMORY_MIB,
        description="MiB reserved.",
    )
    gpu: str | None = Field(
        None, pattern=r"^[A-Za-z0-9:._-]{1,32}$", description="GPU type (Modal)."
    )
    timeout_seconds: int | None = Field(None, ge=5, le=86_400, description="Lifetime limit.")
    idle_timeout_seconds: int | None = Field(None, ge=5, le=86_400, description="Idle limit.")
    # --- limits, placement and the outbound network (Modal); the core's rules decide ---------
    cpu_limit: float | None = Field(
        None,
        ge=policy.MIN_CPU_CORES,
        le=policy.MAX_CPU_CORES,
        description="Throttled above this many cores (≥ cpu).",
    )
    memory_limit_mb: int | None = Field(
        None,
        ge=policy.MIN_MEMORY_MIB,
        le=policy.MAX_MEMORY_MIB,
        description="Killed above this many MiB (≥ memory_mb; locally, per command).",
    )
    region: list[Region] | None = Field(
        None,
        min_length=1,
        max_length=policy.MAX_REGIONS,
        description="Modal regions: us, us-east, us-east-1, …",
    )
    outbound_cidr_allowlist: list[OutboundCidr] | None = Field(
        None,
        max_length=policy.MAX_ALLOWLIST_ENTRIES,
        description="The only public CIDRs commands may reach (Modal).",
    )
    outbound_domain_allowlist: list[OutboundDomain] | None = Field(
        None,
        max_length=policy.MAX_ALLOWLIST_ENTRIES,
        description="The only domains commands may reach, *.example.com allowed (Modal).",
    )

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, value: float | None) -> float | None:
        return None if value is None else policy.cpu_cores(value)

    @field_validator("cpu_limit")
    @classmethod
    def _cpu_limit(cls, value: float | None, info: ValidationInfo) -> float | None:
        return None if value is None else policy.cpu_limit(info.data.get("cpu"), value)

    @field_validator("memory_limit_mb")
    @classmethod
    def _memory_limit(cls, value: int | None, info: ValidationInfo) -> int | None:
        return None if value is None else policy.memory_limit_mib(info.data.get("memory_mb"), value)

    @field_validator("outbound_cidr_allowlist")
    @classmethod
    def _cidrs(cls, value: list[str] | None) -> list[str] | None:
        return policy.outbound_allowlists(False, value, None)[0]

    @field_validator("outbound_domain_allowlist")
    @classmethod
    def _domains(cls, value: list[str] | None) -> list[str] | None:
        return policy.outbound_allowlists(False, None, value)[1]

    @field_validator("region", mode="before")
    @classmethod
    def _one_region(cls, value: object) -> object:
        # Modal takes one region as a string, or several as a list.
        return [value] if isinstance(value, str) else value

    @field_validator("region")
    @classmethod
    def _regions(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else policy.regions(value)

    run_as_root: bool | None = Field(
        None,
        description="Run commands as root (Modal): then no GitHub token enters the workspace "
        "(no use_github_token, no push). Default: uid 1000; prefer apt_packages.",
    )
    # -- the image (Modal): which one, and packages layered on top of it ---------------------
    image_name: ImageName | None = Field(
        None, description="Published Modal image to start from: NAME[:TAG]."
    )
    image_id: ImageId | None = Field(None, description="Modal image id (im-…) to start from.")
    apt_packages: AptPackages | None = Field(
        None,
        description="Debian packages: NAME[=VERSION].",
    )
    pip_packages: PipPackages | None = Field(
        None,
        description="Python packages: NAME[==VERSION].",
    )


class WorkspaceCreate(Input):
    resources: Resources = Field(
        default_factory=lambda: Resources.model_validate({}),
        description="What it may use; what the driver cannot enforce is refused.",
    )
    env: Env = Field(default_factory=dict, description="For every command.")
    secret_names: list[str] = Field(
        default_factory=list, max_length=16, description="Allowlisted secrets, as env."
    )
    volumes: dict[str, str] = Field(
        default_factory=dict, description="Mount path -> allowlisted volume (Modal)."
    )
    tags: Tags = Field(default_factory=dict, description="Your labels.")
    block_network: bool = Field(False, description="No network access.")
    idempotency_key: IdempotencyKey | None = Field(
        None, description="Makes retries safe: the same key, the same workspace."
    )

    @field_validator("block_network")
    @classmethod
    def _no_allowlist_when_blocked(cls, value: bool, info: ValidationInfo) -> bool:
        # Declared after `resources`, so its allowlists are checked by now.
        r = info.data.get("resources")
        if r is not None:
            policy.outbound_allowlists(
                value, r.outbound_cidr_allowlist, r.outbound_domain_allowlist
            )
        return value


class WorkspaceList(Input):
    pass


class WorkspaceRef(Input):
    workspace_id: WorkspaceId


class WorkspaceTerminate(Input):
    workspace_id: WorkspaceId
    keep_snapshot: bool | None = Field(
        None,
        description="Snapshot it first so it can be resumed (default on Modal).",
    )
    purge: bool = Field(False, description="Delete its snapshots too.")


# --- outputs -------------------------------------------------------------------------------------


class WorkspaceListResult(Output):
    workspaces: list[Workspace] = Field(description="The running workspaces, newest first.")
    truncated: bool = Field(
        default=False, description="Only the first entries fitted the response."
    )

    gives_less = (KeepFirst("workspaces"),)


class TerminateResult(Output):
    workspace_id: str = Field(description="The workspace terminated.")
    terminated: bool = Field(description="It is terminated now.")
    snapshot_id: str | None = Field(
        default=None, description="The snapshot kept of it: resume it from this one."
    )


# --- operations ----------------------------------------------------------------------------------


@declare(
    method="POST",
    path="/workspaces",
    hints=WRITE,
    summary="Create a workspace: a durable machine with its root at /workspace.",
    limits="Tags managed-by, workspace-id, workspace-root, repo-* are refused.",
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
        return workspace_out(await _create(svc, policy.new_id("ws"), tags, inp, resources, secrets))
    tags[policy.IDEMPOTENCY_TAG] = key
    made = await once_per_key(
        svc, "create", key, lambda ws: _create(svc, ws, tags, inp, resources, secrets)
    )
    return workspace_out(made)


async def _create(
    svc: Service,
    workspace_id: str,
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
    return await svc.driver.create(workspace_id, spec)


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
    summary="Get a workspace.",
    limits="A stopped or suspended one starts again on its next use.",
)
async def workspace_get(svc: Service, inp: WorkspaceRef) -> Workspace:
    return workspace_out(await svc.record(inp.workspace_id))


@declare(
    method="DELETE",
    path=WS,
    hints=DESTROY,
    summary="Terminate a workspace and all it runs.",
    limits="Answers the snapshot_id it kept, if any, to resume from.",
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
