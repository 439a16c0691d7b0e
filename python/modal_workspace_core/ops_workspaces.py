"""Handlers of the workspace lifecycle: create (idempotent by key), list, get, terminate.

Every value handed to the driver has passed the models' policies and the service's allowlists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import policy
from .drivers.base import WorkspaceRecord, WorkspaceSecrets, WorkspaceSpec
from .models import WorkspaceCreate, WorkspaceList, WorkspaceRef
from .results import TerminateResult, Workspace, WorkspaceListResult

if TYPE_CHECKING:
    from .service_core import Service


def _out(record: WorkspaceRecord) -> Workspace:
    return Workspace.model_validate(record.model_dump())


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


async def workspace_list(svc: Service, inp: WorkspaceList) -> WorkspaceListResult:
    records = await svc.driver.list()
    return WorkspaceListResult(workspaces=[_out(r) for r in records if r.state != "terminated"])


async def workspace_get(svc: Service, inp: WorkspaceRef) -> Workspace:
    return _out(await svc.record(inp.workspace_id))


async def workspace_terminate(svc: Service, inp: WorkspaceRef) -> TerminateResult:
    await svc.record(inp.workspace_id)  # a missing workspace is a 404, not a silent success
    await svc.drop_agent(inp.workspace_id)
    await svc.driver.destroy(inp.workspace_id)
    return TerminateResult(workspace_id=inp.workspace_id, terminated=True)
