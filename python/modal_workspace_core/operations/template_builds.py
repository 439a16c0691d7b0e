"""A template's builds: made, and started from. Shared: `template_create` and the sweep's
rebuilds make them, `workspace_create(template=…)` starts from them.

A build is a workspace of the template's resources that clones the repository at its ref (the
network step as the agent, with the token as its credential when asked), records the commit it
cloned from the agent's own report (before any of the template's code has run), runs the setup
command to its end in the clone, is snapshotted (`lifecycle.take_snapshot`: on Modal a
filesystem image, locally a snapshot of the local driver's kind) and is then ended keeping the
snapshot (`destroy(keep_snapshots=True)`), which new workspaces are forked from. A build that
fails is recorded with why and its workspace removed; the newest good build stays the one
workspaces start from.

The work runs in a task of its own, so a caller waits only as long as its surface allows and
then follows the build's progress on its task stream, kept by the build's agent; that agent is
kept a minute after the end for such a follower to read the last event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import unicodedata
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .. import policy
from ..drivers.base import Lineage, WorkspaceRecord, WorkspaceSpec, utc_now
from ..errors import ConflictError, NotFoundError, UpstreamError, WorkspaceError
from ..git import commands as gitcmd
from ..policy import WORKSPACE_ROOT
from ..runtime.call import ANSWER_BY, CALL, PROGRESS, Reporter
from .exec_engine import drain, run_to_end
from .lifecycle import take_snapshot
from .network_git import agent_paths, network_step
from .resources import IMAGE_FIELDS
from .task_stream import TaskStream
from .template_records import (
    Build,
    TemplateDefinition,
    TemplateStore,
    building,
    check_window,
    last_failure,
    newest_ready,
)

if TYPE_CHECKING:
    from ..runtime.service import Service

__all__ = [
    "BUILD_MARGIN_SECONDS",
    "LINGER_SECONDS",
    "StartedBuild",
    "end_build_workspace",
    "start_build",
    "start_from_template",
]

log = logging.getLogger("modal_workspace_core.templates")

# What a build may take beyond its setup command: the clone, the snapshot (Modal's own deadline
# is 900 s) and the minute its agent is kept for a follower. Past its deadline a build still
# recorded as under way was lost with its gateway.
BUILD_MARGIN_SECONDS = 3600
CLONE_TIMEOUT_SECONDS = 1200
# How long a build's workspace outlives its end when a caller follows its task stream.
LINGER_SECONDS = 60
# The tag a build's workspace carries while it runs (its value: the template and the build).
BUILD_TAG = "template-build"
# The output of the clone and the setup kept for an error's words, head and tail.
_OUTPUT_CAP = 16_384
_END_SECONDS = 30.0


@dataclass
class StartedBuild:
    """A build under way: its record as it started, its task stream, and the task doing it."""

    build: Build
    stream: TaskStream
    job: asyncio.Task[Build] | None = None
    # Set when the caller that started it stopped waiting and follows its task stream: its
    # workspace then lingers after the end, for the last event to be read.
    followed: bool = field(default=False)

    def follow(self) -> None:
        """The caller has its answer and follows the stream: its own progress notifications
        end here, and the build's workspace lingers after the end."""
        self.stream.reporter = None
        self.followed = True


async def start_build(
    svc: Service, definition: TemplateDefinition, reason: str
) -> StartedBuild | None:
    """Claims the template's next build, creates its workspace and starts the work in the
    background. None when a build of the template is under way (or another gateway claimed
    this one first)."""
    store = TemplateStore(svc.shared_store)
    name = definition.name
    builds = await store.builds(name)
    if building(builds) is not None:
        return None
    now = datetime.now(UTC)
    deadline = now + timedelta(seconds=definition.setup_timeout_seconds + BUILD_MARGIN_SECONDS)
    build = Build(
        number=builds[-1].number + 1 if builds else 1,
        workspace_id=policy.new_id("ws"),
        state="building",
        reason=reason,
        started_at=utc_now(),
        deadline=deadline.isoformat(timespec="seconds").replace("+00:00", "Z"),
    )
    if not await store.claim_build(name, build):
        return None
    log.info("template %s: build %d started (%s)", name, build.number, reason)
    interval = svc.settings.template_check_seconds
    if interval > 0:
        # The build reads the branch's head itself: it is this interval's check.
        await store.claim_check(name, check_window(now, interval))
    try:
        record = await svc.driver.create(build.workspace_id, _build_spec(definition, build))
        stream = await TaskStream.open(
            svc, build.workspace_id, "template_build", {"template": name, "build": build.number}
        )
    except BaseException as exc:
        await _failed(svc, store, name, build, None, exc)
        raise
    build = build.model_copy(update={"progress_stream_id": stream.task_id})
    await store.save_build(name, build)
    started = StartedBuild(build, stream)
    started.job = svc.spawn(_build(svc, store, definition, started, record, stream))
    return started


def _build_spec(definition: TemplateDefinition, build: Build) -> WorkspaceSpec:
    """The build's workspace: the template's resources, with a lifetime that bounds the build
    rather than the template's own limits (which are its workspaces')."""
    resources = {
        k: v
        for k, v in definition.resources.items()
        if k not in ("timeout_seconds", "idle_timeout_seconds")
    }
    resources["timeout_seconds"] = (
        definition.setup_timeout_seconds + BUILD_MARGIN_SECONDS + LINGER_SECONDS
    )
    tags = {BUILD_TAG: f"{definition.name}.{build.number}"}
    return WorkspaceSpec(tags=tags, resources=resources)


async def _build(
    svc: Service,
    store: TemplateStore,
    definition: TemplateDefinition,
    started: StartedBuild,
    record: WorkspaceRecord,
    stream: TaskStream,
) -> Build:
    """The build's work, in a task of its own (see the module's docstring)."""
    # The gateway's own work, with no caller's deadline, and no use of the workspace a caller
    # made; the setup's output and the snapshot's progress go to the build's stream.
    ANSWER_BY.set(None)
    CALL.set(None)
    PROGRESS.set(_reporter(stream))
    stream.keep_alive()
    build, name, ws = started.build, definition.name, record.workspace_id
    try:
        build = build.model_copy(update={"head": await _clone(svc, record, definition, stream)})
        await _setup(svc, record, definition, stream)
        snapshot = await take_snapshot(svc, ws, "manual", label=f"template {name}")
        if await store.definition(name) is None:
            raise ConflictError(f"template {name} was deleted while build {build.number} ran")
    except BaseException as exc:
        return await _failed(svc, store, name, build, stream, exc)
    ready = build.model_copy(update={"state": "ready", "ended_at": utc_now(), "snapshot": snapshot})
    await store.save_build(name, ready)
    log.info("template %s: build %d ready at %s", name, ready.number, ready.head)
    await stream.finish(_summary(ready))
    try:
        await _prune(svc, store, name)
        await _linger(started)
    finally:
        # Ended even when the gateway stops meanwhile: the build is good, its snapshot kept.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(_END_SECONDS):
                await end_build_workspace(svc, ws, keep=True)
    return ready


# The most failed builds a template keeps on record after its newest good one.
FAILED_KEPT = 5


async def _prune(svc: Service, store: TemplateStore, name: str) -> None:
    """Keeps a template's builds bounded: once a build is good, the builds before it go, good
    ones with their snapshots (new workspaces start from the newest; those made from an older
    one have their own files); of the failures since, the newest `FAILED_KEPT` stay on record."""
    builds = await store.builds(name)
    good = newest_ready(builds)
    failed = [b for b in builds if b.state == "failed" and (good is None or b.number > good.number)]
    gone = [b for b in builds if good is not None and b.number < good.number]
    gone += failed[:-FAILED_KEPT]
    for build in gone:
        if build.state != "failed":
            # A lost build's workspace may outlive it; a good one's holds its snapshot.
            with contextlib.suppress(WorkspaceError):
                await end_build_workspace(svc, build.workspace_id, keep=False)
        await store.forget_build(name, build.number)


async def _clone(
    svc: Service, record: WorkspaceRecord, definition: TemplateDefinition, stream: TaskStream
) -> str:
    """Clones the repository at the template's ref (as `repo_clone` does, into
    `/workspace/REPO`) and returns the commit cloned, as the agent's git reported it on the
    exec's report channel: no process of the workspace can write that, and none of the
    template's own code has run yet."""
    ws = record.workspace_id
    repo = policy.github_repo(definition.repository)
    dest = f"{WORKSPACE_ROOT}/{repo.name}"
    base = svc.settings.github_url
    url = repo.url_on(base)
    ref = definition.ref
    await stream.report(0, None, f"cloning {repo.slug}" + (f" at {ref}" if ref else ""))
    agent_dir, askpass = await agent_paths(svc, ws)
    mirror = gitcmd.mirror_path(agent_dir, dest)
    argv = gitcmd.mirror_argv("clone", url, mirror, ref, None, base)
    network, secrets = await network_step(
        svc, record, repo, argv, askpass=askpass, use_token=definition.use_github_token
    )
    steps: list[dict[str, Any]] = [
        network,
        {
            "argv": gitcmd.clone_from_mirror_argv(mirror, dest, ref, None, url),
            "env": dict(gitcmd.WORKSPACE_STEP_ENV),
            "workdir": record.root,
        },
        {
            "identity": "agent",
            "argv": gitcmd.mirror_head_argv(mirror, ref),
            "env": gitcmd.mirror_env(None),
            "report": True,
        },
    ]
    exec_id = policy.new_id("ex")
    args: dict[str, Any] = {
        "exec_id": exec_id,
        "steps": steps,
        "timeout_seconds": CLONE_TIMEOUT_SECONDS,
    }
    if secrets:
        args["secrets"] = secrets  # values to redact; they travel only in this request
    await svc.request(ws, "exec.start", args)
    done = await drain(svc, ws, exec_id, timeout_seconds=CLONE_TIMEOUT_SECONDS, cap=_OUTPUT_CAP)
    status, _ = await svc.request(ws, "exec.status", {"exec_id": exec_id, "report": True})
    if status.get("state") != "finished" or status.get("returncode") != 0:
        raise UpstreamError(f"the clone of {repo.slug} failed: {_last_words(done.stderr.text())}")
    head = gitcmd.report_head(str(status.get("report") or ""))
    if head is None:
        raise UpstreamError(f"the clone of {repo.slug} reported no commit")
    tags = {"repo-url": repo.url, "repo-path": dest}
    if ref:
        tags["repo-ref"] = ref
    await svc.merge_tags(ws, tags)
    return head


async def _setup(
    svc: Service, record: WorkspaceRecord, definition: TemplateDefinition, stream: TaskStream
) -> None:
    """Runs the setup command in the clone to its end; anything but exit 0 fails the build."""
    command = definition.setup_command
    if not command:
        return
    repo = policy.github_repo(definition.repository)
    await stream.report(0, None, "running the setup command")
    done = await run_to_end(
        svc,
        record,
        command=command,
        workdir=f"{WORKSPACE_ROOT}/{repo.name}",
        timeout_seconds=definition.setup_timeout_seconds,
        cap=_OUTPUT_CAP,
    )
    state, returncode = done.status.get("state"), done.status.get("returncode")
    if state == "finished" and returncode == 0:
        return
    how = f"exited {returncode}" if state == "finished" else f"ended {state}"
    words = _last_words(done.stderr.text()) or _last_words(done.stdout.text())
    raise UpstreamError(f"the setup command {how}: {words}")


async def _failed(
    svc: Service,
    store: TemplateStore,
    name: str,
    build: Build,
    stream: TaskStream | None,
    exc: BaseException,
) -> Build:
    """Records why the build failed, reports it and removes its workspace; the template keeps
    its last good build. A cancelled build (its gateway stopping) is recorded so, and the
    cancellation goes on."""
    if isinstance(exc, asyncio.CancelledError):
        error: WorkspaceError = UpstreamError(
            f"the gateway stopped before build {build.number} of template {name} ended"
        )
    else:
        error = svc.caller_error(exc)
    failed = build.model_copy(
        update={"state": "failed", "ended_at": utc_now(), "error": error.message[:1000]}
    )
    log.warning("template %s: build %d failed: %s", name, build.number, failed.error)
    with contextlib.suppress(BaseException):
        async with asyncio.timeout(_END_SECONDS):
            if await store.definition(name) is None:
                await store.forget_build(name, build.number)  # the template is gone
            else:
                await store.save_build(name, failed)
            if stream is not None:
                await stream.fail(error)
            await end_build_workspace(svc, build.workspace_id, keep=False)
            await _prune(svc, store, name)
    if isinstance(exc, asyncio.CancelledError):
        raise exc
    return failed


async def end_build_workspace(svc: Service, workspace_id: str, *, keep: bool) -> None:
    """Ends a build's workspace: keeping its snapshot (a good build, whose snapshot workspaces
    start from), or with everything it had. One already gone is fine."""
    await svc.drop_agent(workspace_id)
    with contextlib.suppress(NotFoundError):
        await svc.driver.destroy(workspace_id, keep_snapshots=keep)


async def _linger(started: StartedBuild) -> None:
    if started.followed:
        await asyncio.sleep(LINGER_SECONDS)


def _summary(build: Build) -> dict[str, Any]:
    """The build as its task stream's last event holds it."""
    return build.model_dump(mode="json", include={"number", "state", "head", "ended_at"}) | {
        "snapshot_id": build.snapshot.snapshot_id if build.snapshot else None
    }


def _reporter(stream: TaskStream) -> Reporter:
    """The build's progress (the setup's latest line, a snapshot's bytes) on its stream."""

    async def report(done: float, message: str) -> None:
        await stream.report(int(done), None, _printable(message))

    return report


def _printable(text: str) -> str:
    # A task's progress message holds no control character (the agent refuses one).
    return "".join(" " if unicodedata.category(c).startswith("C") else c for c in text)


def _last_words(text: str) -> str:
    return text.strip()[-500:]


async def start_from_template(
    svc: Service, workspace_id: str, name: str, spec: WorkspaceSpec
) -> WorkspaceRecord:
    """A new workspace `workspace_id` forked from template `name`'s newest good build, with the
    template's resources under what `spec` asks for, the build's repository tags and a lineage
    that names the template and the build."""
    store = TemplateStore(svc.shared_store)
    definition = await store.definition(name)
    if definition is None:
        raise NotFoundError(
            f"template {name} does not exist (template_list shows those that do)", field="template"
        )
    builds = await store.builds(name)
    ready = newest_ready(builds)
    if ready is None or ready.snapshot is None:
        raise ConflictError(_no_build(name, builds), field="template")
    snapshot = ready.snapshot
    inherited = {k: v for k, v in definition.resources.items() if k not in IMAGE_FIELDS}
    tags = {**spec.tags, **{k: v for k, v in snapshot.tags.items() if k.startswith("repo-")}}
    lineage = Lineage(
        parent_workspace_id=ready.workspace_id,
        snapshot_id=snapshot.snapshot_id,
        repos=dict(snapshot.repos),
        forked_at=utc_now(),
        template=name,
        template_build=ready.number,
    )
    spec = spec.model_copy(update={"resources": {**inherited, **spec.resources}, "tags": tags})
    return await svc.driver.fork(snapshot, workspace_id, spec, lineage)


def _no_build(name: str, builds: list[Build]) -> str:
    under_way = building(builds)
    if under_way is not None:
        return (
            f"template {name} has no build yet: build {under_way.number} is under way; "
            "create the workspace once template_list shows it ready"
        )
    failure = last_failure(builds)
    why = f" (build {failure.number}: {failure.error})" if failure else ""
    return f"template {name} has no good build{why}: call template_create again to rebuild it"
