"""Templates: a repository prepared once (cloned at a ref, its setup command run) and kept as a
snapshot, which `workspace_create(template=…)` starts new workspaces from in the time a fork
takes. Create, list and delete; the builds themselves are `template_builds`', the records
`template_records`', and the lifecycle sweep rebuilds a template when its branch moves
(`template_checks`).

Outside the GPT Actions schema, which is full: a template is prepared by an operator or an
agent on MCP or the Python API, and any client starts workspaces from it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from ..drivers.base import utc_now
from ..errors import ConflictError, NotFoundError, PermissionDeniedError
from ..git import credentials
from .machinery.fields import Command, GitRef, Input, Output, Repository, TemplateName
from .machinery.fitting import KeepFirst
from .machinery.limits import Bound, Bounds
from .machinery.table import DESTROY, NETWORK, READ, Declarations
from .resources import Resources
from .task_stream import wait_budget
from .template_builds import end_build_workspace, start_build
from .template_records import (
    Build,
    TemplateDefinition,
    TemplateStore,
    building,
    last_failure,
    newest_ready,
)

if TYPE_CHECKING:
    from ..runtime.service import Service

declare = Declarations()

TEMPLATES = "/templates"
# How long a setup command may run (a build's own deadline adds the clone and the snapshot).
DEFAULT_SETUP_SECONDS = 1800
MAX_SETUP_SECONDS = 3 * 3600
# The longest a call waits for its build: each surface waits less, and a build that takes
# longer goes on after the answer, its progress on its task stream.
MAX_BUILD_WAIT = 3600.0
_BUILD_BOUNDS: Bounds = {
    "actions": {"wait_seconds": Bound(30, 30)},
    "mcp": {"wait_seconds": Bound(50, 40)},
}


# --- inputs --------------------------------------------------------------------------------------


class TemplateCreate(Input):
    name: TemplateName
    repository: Repository
    ref: GitRef | None = Field(None, description="Default: the remote's default branch.")
    setup_command: Command | None = Field(None, description="Run once in the clone (bash).")
    setup_timeout_seconds: int = Field(DEFAULT_SETUP_SECONDS, ge=10, le=MAX_SETUP_SECONDS)
    resources: Resources = Field(
        default_factory=lambda: Resources.model_validate({}),
        description="Its workspaces' (as workspace_create's).",
    )
    use_github_token: bool = Field(False, description="Use the gateway's GitHub token.")
    wait_seconds: float = Field(
        MAX_BUILD_WAIT,
        ge=0,
        le=MAX_BUILD_WAIT,
        description="Then answer building.",
    )


class TemplateListInput(Input):
    pass


class TemplateRef(Input):
    name: TemplateName


# --- outputs -------------------------------------------------------------------------------------


TemplateState = Literal["ready", "building", "failed"]


class Template(Output):
    """A template and its builds, flat: the newest good build (what new workspaces start from),
    one under way, and one that failed since the newest good one."""

    name: str = Field(description="The template's name.")
    state: TemplateState = Field(
        description="ready: workspaces start from `build`; building: its first build is under "
        "way; failed: no good build (see error)."
    )
    repository: str = Field(description="The canonical repository URL.")
    ref: str | None = Field(default=None, description="The ref built; null: the default branch.")
    setup_command: str | None = Field(default=None, description="Run once in the clone.")
    resources: dict[str, object] = Field(default={}, description="Its workspaces' resources.")
    build: int | None = Field(
        default=None, description="The newest good build (1, then one more each rebuild)."
    )
    head: str | None = Field(default=None, description="The commit that build built.")
    built_at: str | None = Field(default=None, description="When it ended (RFC 3339, UTC).")
    building: int | None = Field(default=None, description="A build under way.")
    building_workspace_id: str | None = Field(
        default=None, description="Its workspace (for stream_events)."
    )
    progress_stream_id: str | None = Field(
        default=None, description="Its progress; the exit event holds the build."
    )
    failed_build: int | None = Field(
        default=None, description="A build that failed since the newest good one."
    )
    error: str | None = Field(default=None, description="Why it failed.")


class TemplateList(Output):
    templates: list[Template] = Field(description="Every template, by name.")
    truncated: bool = Field(default=False, description="Only the first entries fitted.")

    gives_less = (KeepFirst("templates"),)


class TemplateDeleted(Output):
    name: str = Field(description="The template deleted.")
    deleted: bool = Field(description="It is deleted now.")
    builds_deleted: int = Field(description="Its builds, with their snapshots and workspaces.")


def template_out(definition: TemplateDefinition, builds: list[Build]) -> Template:
    good, under_way, failure = newest_ready(builds), building(builds), last_failure(builds)
    state: TemplateState = "ready" if good else "building" if under_way else "failed"
    return Template(
        name=definition.name,
        state=state,
        repository=definition.repository,
        ref=definition.ref,
        setup_command=definition.setup_command,
        resources=definition.resources,
        build=good.number if good else None,
        head=good.head if good else None,
        built_at=good.ended_at if good else None,
        building=under_way.number if under_way else None,
        building_workspace_id=under_way.workspace_id if under_way else None,
        progress_stream_id=under_way.progress_stream_id if under_way else None,
        failed_build=failure.number if failure else None,
        error=failure.error if failure else None,
    )


# --- operations ----------------------------------------------------------------------------------


@declare(
    method="POST",
    path=TEMPLATES,
    hints=NETWORK,
    summary="Create a template: clone a repository, run its setup once, snapshot it.",
    limits="workspace_create's template starts from it; rebuilt when its branch moves.",
    in_actions=False,
    bounds=_BUILD_BOUNDS,
)
async def template_create(svc: Service, inp: TemplateCreate) -> Template:
    resources = inp.resources.model_dump(exclude_none=True)
    _check_token(svc, inp.use_github_token, resources)
    svc.gpu(inp.resources.gpu)
    store = TemplateStore(svc.shared_store)
    definition = TemplateDefinition(
        name=inp.name,
        repository=inp.repository,
        ref=inp.ref,
        setup_command=inp.setup_command,
        setup_timeout_seconds=inp.setup_timeout_seconds,
        resources=resources,
        use_github_token=inp.use_github_token,
        created_at=utc_now(),
    )
    created = await store.define(definition)
    if not created:
        definition = await _same_definition(store, definition)
        builds = await store.builds(inp.name)
        if newest_ready(builds) is not None or building(builds) is not None:
            return template_out(definition, builds)  # as it is: a retry, not a second build
    try:
        started = await start_build(svc, definition, "created" if created else "asked again")
    except BaseException:
        if created:
            # Its first build could not even start (its resources refused, say): the name is
            # free again for a corrected request.
            await store.remove(inp.name)
        raise
    if started is not None and started.job is not None:
        try:
            await asyncio.wait_for(asyncio.shield(started.job), wait_budget(inp.wait_seconds))
        except TimeoutError:
            started.follow()
    return template_out(definition, await store.builds(inp.name))


def _check_token(svc: Service, use_token: bool, resources: dict[str, object]) -> None:
    """Refuses a token a build could not be given, before anything is made."""
    if not use_token:
        return
    if resources.get("run_as_root"):
        raise PermissionDeniedError(
            "use_github_token: a template whose commands run as root (resources.run_as_root) "
            "gets no GitHub token; build it from a public repository, or without run_as_root",
            field="use_github_token",
        )
    if not credentials.app_configured(svc):
        svc.github_token(credentials.SECRET_AS, "use_github_token")


async def _same_definition(
    store: TemplateStore, definition: TemplateDefinition
) -> TemplateDefinition:
    """The template already recorded under the name, when it is this one (a retry); else a
    conflict naming the name."""
    existing = await store.definition(definition.name)
    if existing is None:
        raise ConflictError(
            f"template {definition.name} was deleted meanwhile: try again", field="name"
        )
    if existing.model_dump(exclude={"created_at"}) == (
        definition.model_dump(exclude={"created_at"})
    ):
        return existing
    raise ConflictError(
        f"template {definition.name} exists with another definition: delete it first "
        "(template_delete) or choose another name",
        field="name",
    )


@declare(
    method="GET",
    path=TEMPLATES,
    hints=READ,
    summary="List the templates: each with its builds.",
    in_actions=False,
)
async def template_list(svc: Service, inp: TemplateListInput) -> TemplateList:
    store = TemplateStore(svc.shared_store)
    found = []
    for name in await store.names():
        definition = await store.definition(name)
        if definition is not None:
            found.append(template_out(definition, await store.builds(name)))
    return TemplateList(templates=found)


@declare(
    method="DELETE",
    path=TEMPLATES + "/{name}",
    hints=DESTROY,
    summary="Delete a template: its builds' snapshots too.",
    in_actions=False,
)
async def template_delete(svc: Service, inp: TemplateRef) -> TemplateDeleted:
    store = TemplateStore(svc.shared_store)
    if await store.definition(inp.name) is None:
        raise NotFoundError(f"template {inp.name} does not exist", field="name")
    builds = await store.builds(inp.name)
    # The records go first, so that no create or rebuild starts from a build being removed; a
    # build's workspace that could not be removed now is purged by the sweep's retention, as
    # no template records it any more.
    await store.remove(inp.name)
    for build in builds:
        await end_build_workspace(svc, build.workspace_id, keep=False)
    return TemplateDeleted(name=inp.name, deleted=True, builds_deleted=len(builds))


__all__ = ["Template", "TemplateList", "template_out"]
