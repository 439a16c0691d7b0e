"""Whether a template's branch moved, asked by the lifecycle sweep (`janitor.py`): at most once
per template per `MODAL_WORKSPACE_TEMPLATE_CHECK_SECONDS`, by one gateway however many sweep
(the first to claim the interval's check in the shared store), and a rebuild when it moved.

The remote is asked from a short-lived workspace of the gateway's own, one per sweep for every
template due (`git ls-remote` as the agent's network step, with the token as its credential
where the template uses one: no process outside the agent's step holds it), and its answer is
read from the exec's report channel, which no process of a workspace can write. A template
pinned to a commit never moves and is never asked about.

The sweep also settles what a gateway that stopped mid-build left behind: a build still recorded
as under way past its deadline is recorded as failed and its workspace removed. (A build's
workspace that a gateway stopped before ending, after its build was recorded good, ends with its
lifetime, which bounds every build's workspace.)
"""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import policy
from ..drivers.base import WorkspaceSpec, utc_now
from ..errors import UpstreamError, WorkspaceError
from ..git import commands as gitcmd
from .exec_engine import drain
from .network_git import agent_paths, network_step
from .template_builds import end_build_workspace, start_build
from .template_records import (
    Build,
    TemplateDefinition,
    TemplateStore,
    building,
    check_window,
)

if TYPE_CHECKING:
    from ..drivers.base import WorkspaceRecord
    from ..runtime.service import Service

__all__ = ["check_templates", "recorded_build_workspaces"]

log = logging.getLogger("modal_workspace_core.templates")

# The probe: a workspace that lives only to ask the remotes, and how long one question may take.
PROBE_TAG = "template-probe"
_PROBE_LIFETIME_SECONDS = 600
_ASK_TIMEOUT_SECONDS = 120


async def check_templates(svc: Service, now: datetime) -> None:
    """One sweep's work on the templates (see the module's docstring)."""
    interval = svc.settings.template_check_seconds
    store = TemplateStore(svc.shared_store)
    due: list[tuple[TemplateDefinition, list[Build]]] = []
    for name in await store.names():
        definition = await store.definition(name)
        if definition is None:
            continue
        builds = await store.builds(name)
        await _settle(svc, store, name, builds, now)
        if interval <= 0 or building(builds, now) is not None:
            continue
        if definition.ref is not None and gitcmd.is_commit(definition.ref):
            continue  # a commit never moves
        if await store.claim_check(name, check_window(now, interval)):
            due.append((definition, builds))
    if not due:
        return
    heads = await _remote_heads(svc, [definition for definition, _ in due])
    for definition, builds in due:
        head = heads.get(definition.name)
        newest = builds[-1] if builds else None
        if head is None or (newest is not None and newest.head == head):
            continue  # not asked, or not moved since the newest build (good or not)
        try:
            await start_build(svc, definition, f"its branch moved to {head[:12]}")
        except WorkspaceError as exc:
            log.warning("template %s: the rebuild could not start: %s", definition.name, exc)


async def _settle(
    svc: Service, store: TemplateStore, name: str, builds: list[Build], now: datetime
) -> None:
    """Records a build lost with its gateway as failed, and removes its workspace."""
    for build in builds:
        if not build.lost(now):
            continue
        log.warning("template %s: build %d was lost with its gateway", name, build.number)
        failed = build.model_copy(
            update={
                "state": "failed",
                "ended_at": utc_now(),
                "error": "the gateway building it stopped before it ended",
            }
        )
        await store.save_build(name, failed)
        with contextlib.suppress(WorkspaceError):
            await end_build_workspace(svc, build.workspace_id, keep=False)


async def recorded_build_workspaces(svc: Service) -> set[str]:
    """The workspaces of every build on record: their snapshots are what templates start from,
    so the sweep's retention leaves them to the templates (`template_delete` removes them)."""
    store = TemplateStore(svc.shared_store)
    found: set[str] = set()
    for name in await store.names():
        found.update(build.workspace_id for build in await store.builds(name))
    return found


async def _remote_heads(
    svc: Service, definitions: list[TemplateDefinition]
) -> dict[str, str | None]:
    """Each template's branch head as its remote has it now, asked from one probe workspace
    (a template whose remote could not be asked is left out, and asked again next interval)."""
    heads: dict[str, str | None] = {}
    probe = policy.new_id("ws")
    spec = WorkspaceSpec(
        tags={PROBE_TAG: "ls-remote"}, resources={"timeout_seconds": _PROBE_LIFETIME_SECONDS}
    )
    try:
        record = await svc.driver.create(probe, spec)
        _, askpass = await agent_paths(svc, probe)
        for definition in definitions:
            try:
                heads[definition.name] = await _remote_head(svc, record, definition, askpass)
            except WorkspaceError as exc:
                log.warning("template %s: could not ask its remote: %s", definition.name, exc)
    except WorkspaceError as exc:
        log.warning("the templates' check could not start its probe workspace: %s", exc)
    finally:
        with contextlib.suppress(Exception):
            await end_build_workspace(svc, probe, keep=False)
    return heads


async def _remote_head(
    svc: Service, record: WorkspaceRecord, definition: TemplateDefinition, askpass: str
) -> str | None:
    """The commit the template's ref names on its remote now (None: the remote has no such
    ref), from the agent step's report."""
    ws = record.workspace_id
    repo = policy.github_repo(definition.repository)
    base = svc.settings.github_url
    argv = gitcmd.remote_refs_argv(repo.url_on(base), definition.ref, base)
    step, secrets = await network_step(
        svc,
        record,
        repo,
        argv,
        askpass=askpass,
        use_token=definition.use_github_token,
        report=True,
    )
    exec_id = policy.new_id("ex")
    args: dict[str, Any] = {
        "exec_id": exec_id,
        "steps": [step],
        "timeout_seconds": _ASK_TIMEOUT_SECONDS,
    }
    if secrets:
        args["secrets"] = secrets
    await svc.request(ws, "exec.start", args)
    done = await drain(svc, ws, exec_id, timeout_seconds=_ASK_TIMEOUT_SECONDS, cap=4096)
    status, _ = await svc.request(ws, "exec.status", {"exec_id": exec_id, "report": True})
    if status.get("state") != "finished" or status.get("returncode") != 0:
        raise UpstreamError(f"git ls-remote of {repo.slug} failed: {done.stderr.text()[-300:]}")
    return gitcmd.remote_head(str(status.get("report") or ""), definition.ref)
