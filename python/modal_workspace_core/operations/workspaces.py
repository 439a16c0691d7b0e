"""Workspaces: create (idempotently), list, get and terminate."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, ValidationInfo, field_validator

from .. import policy
from ..drivers.base import WorkspaceRecord, WorkspaceSecrets, WorkspaceSpec
from ..errors import InvalidArgumentError
from .experiment_records import ExperimentStore
from .lifecycle import take_snapshot
from .machinery.fields import (
    Env,
    IdempotencyKey,
    Input,
    Output,
    PreviewPorts,
    Tags,
    TemplateName,
    WorkspaceId,
)
from .machinery.fitting import KeepFirst
from .machinery.table import DESTROY, READ, WRITE, WS, Declarations
from .resources import IMAGE_FIELDS, Resources
from .template_builds import start_from_template
from .workspace_info import Workspace, latest_metrics, once_per_key, workspace_out

if TYPE_CHECKING:
    from ..runtime.service import Service

declare = Declarations()


# --- inputs --------------------------------------------------------------------------------------


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
    tags: Tags = Field(default_factory=dict, description="Your labels (managed keys refused).")
    block_network: bool = Field(False, description="No network access.")
    idempotency_key: IdempotencyKey | None = Field(
        None, description="Makes retries safe: the same key, the same workspace."
    )
    template: TemplateName | None = Field(None, description="Start from its newest build.")
    ports: PreviewPorts = Field(
        default_factory=list,
        description="TCP ports for workspace_preview_url (1024-65535, at most 8).",
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
)
async def workspace_create(svc: Service, inp: WorkspaceCreate) -> Workspace:
    # Everything that can refuse the request is checked before the driver is called.
    secrets = svc.workspace_secrets(inp.secret_names)
    volumes = svc.volumes(inp.volumes)
    svc.gpu(inp.resources.gpu)
    resources = inp.resources.model_dump(exclude_none=True)
    if inp.template is not None:
        for name in IMAGE_FIELDS:
            if name in resources:
                raise InvalidArgumentError(
                    f"resources.{name}: a workspace made from a template has its build's image; "
                    "give the image to the template (template_create) instead",
                    field=f"resources.{name}",
                )
    if volumes:
        resources["volumes"] = volumes
    if inp.ports:
        # Kept in the record with the resources, so a fork and a resume serve the same ones.
        resources["ports"] = list(inp.ports)
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
    if inp.template is not None:
        return await start_from_template(svc, workspace_id, inp.template, spec)
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
    record = await svc.record(inp.workspace_id)
    return workspace_out(record, metrics=await latest_metrics(svc, inp.workspace_id))


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
    if not kept:
        # Purged: it reads as never made, and so do its runs.
        await ExperimentStore(svc.shared_store).forget(ws)
    return TerminateResult(workspace_id=ws, terminated=True, snapshot_id=snapshot_id)


async def _has_snapshots(svc: Service, workspace_id: str) -> bool:
    return bool(await svc.driver.list_snapshots(workspace_id))
