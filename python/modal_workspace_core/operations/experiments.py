"""Experiments: a command run as a realtime exec and recorded as a run the agent (or a person) can
read back after the workspace ended: what ran and on what (the command, its workdir, the
repository's HEAD and whether it had changes, the resources), how it ended, how long it took,
and what it reported of itself (`::metric` lines: `experiment_lines`). The records are in the
deployment's shared store (`experiment_records`), so they outlive the gateway that started the
run and the workspace's sandbox; a fork lists its parent's runs from before its snapshot and
names the run it came from.

The gateway follows each run (a background task per run: its output, read from the exec's
durable log, folded into the run's metrics, written every few seconds while it runs and once
at its end). A gateway that restarted, or another one, takes a run over at its next read,
reading the log from its start; a run whose workspace ended first is recorded `lost` with what
was read. Following never resumes a workspace (`RESUMES`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, cast

from pydantic import Field

from .. import policy
from ..drivers.base import Lineage, utc_now
from ..errors import NotFoundError, WorkspaceError
from ..git.commands import report_head
from ..path_view import host_path
from ..policy import WORKSPACE_ROOT
from ..runtime.call import PROGRESS
from .exec_engine import exec_args, run_to_end
from .experiment_follow import follow_run, instant
from .experiment_plot import panels, render_png
from .experiment_records import ExperimentStore, RunRecord, RunState
from .machinery.fields import (
    Command,
    Env,
    ImageAnswer,
    Input,
    Label,
    Output,
    RunId,
    WorkspaceId,
    WorkspacePath,
)
from .machinery.fitting import KeepLast
from .machinery.table import READ, RUN, WS, Declarations, RawReply, RawRest

if TYPE_CHECKING:
    from ..runtime.service import Service

__all__ = [
    "experiment_get",
    "experiment_list",
    "experiment_plot",
    "experiment_start",
]

log = logging.getLogger(__name__)
declare = Declarations()

XP = WS + "/experiments"
# Where a run's artifacts go by default, under the workspace's root.
ARTIFACTS = ".experiments"
# --- inputs and outputs ----------------------------------------------------------------------


class ExperimentStart(Input):
    workspace_id: WorkspaceId
    command: Command = Field(description="Run with bash -lc.")
    workdir: WorkspacePath | None = Field(None, description="Default /workspace.")
    env: Env = Field(default_factory=dict, description="Added to the workspace's.")
    name: Label = ""
    timeout_seconds: float = Field(24 * 3600, gt=0, le=7 * 24 * 3600)


class ExperimentRef(Input):
    workspace_id: WorkspaceId
    run_id: RunId


class ExperimentPlot(ImageAnswer):
    run_id: str
    state: RunState
    panels: list[str] = Field(description="What it draws, one panel each.")


class ExperimentListInput(Input):
    workspace_id: WorkspaceId


class Experiment(RunRecord, Output):
    """A run as recorded (`RunRecord`), and for a fork's inherited run, whose it was."""

    inherited_from: str | None = Field(
        default=None, description="A parent's run: the workspace it ran in (this is a fork)."
    )


class ForkedFrom(Output):
    workspace_id: str
    snapshot_id: str
    run_id: str | None = Field(
        default=None, description="The parent's run going on or last ended when it was taken."
    )


class ExperimentList(Output):
    runs: list[Experiment] = Field(description="Oldest first; a fork's parent's runs first.")
    forked_from: ForkedFrom | None = None
    truncated: bool = Field(
        default=False, description="Older runs left out to fit; experiment_get reads any."
    )

    # A long-lived workspace's runs outgrow an answer: the newest are kept.
    gives_less = (KeepLast("runs"),)


# --- operations ------------------------------------------------------------------------------


@declare(
    method="POST",
    path=XP,
    hints=RUN,
    summary="Start an experiment: run a command in the background and record the run.",
    limits="Follow exec_id with stream_events; experiment_get reads the record, kept after "
    "the workspace ends. Report metrics as lines: ::metric loss=0.31 step=120.",
    in_actions=False,
)
async def experiment_start(svc: Service, inp: ExperimentStart) -> Experiment:
    record = await svc.live_record(inp.workspace_id)
    run_id = policy.new_id("xp")
    artifacts = f"{WORKSPACE_ROOT}/{ARTIFACTS}/{run_id}"
    head, dirty = await _repository_state(svc, inp.workspace_id, artifacts, inp.workdir)
    exec_id = policy.new_id("ex")
    env = {
        **inp.env,
        "MWC_EXPERIMENT_ID": run_id,
        "MWC_ARTIFACTS_DIR": host_path(record, artifacts),
    }
    run = RunRecord(
        run_id=run_id,
        workspace_id=inp.workspace_id,
        name=inp.name or None,
        command=inp.command,
        workdir=inp.workdir,
        exec_id=exec_id,
        head=head,
        dirty=dirty,
        resources=dict(record.resources),
        artifacts_dir=artifacts,
        started_at=utc_now(),
    )
    store = ExperimentStore(svc.shared_store)
    # Recorded before it starts: a run never runs unrecorded.
    await store.write(run)
    args = exec_args(
        record,
        exec_id,
        command=inp.command,
        workdir=inp.workdir,
        env=env,
        timeout_seconds=inp.timeout_seconds,
        report_metrics=True,
    )
    try:
        await svc.request(inp.workspace_id, "exec.start", args)
    except BaseException:
        with contextlib.suppress(Exception):
            await store.write(
                run.model_copy(
                    update={"state": "failed", "ended_at": utc_now(), "error": "did not start"}
                )
            )
        raise
    svc.spawn(follow_run(svc, run))
    return Experiment(**run.model_dump())


@declare(
    method="GET",
    path=XP + "/{run_id}",
    hints=READ,
    summary="Get an experiment's run: what ran, how it ended, what it reported.",
    in_actions=False,
)
async def experiment_get(svc: Service, inp: ExperimentRef) -> Experiment:
    ws = inp.workspace_id
    record = await svc.driver.get(ws)
    store = ExperimentStore(svc.shared_store)
    own = await store.run(ws, inp.run_id)
    if own is not None:
        run = Experiment(**own.model_dump())
        if run.state == "running":
            await _take_over(svc, run, record.state)
        return run
    lineage = record.lineage
    if lineage is not None:
        parent = lineage.parent_workspace_id
        theirs = await store.run(parent, inp.run_id)
        if theirs is not None and instant(theirs.started_at) <= await _taken(svc, lineage):
            return Experiment(**theirs.model_dump(), inherited_from=parent)
    raise NotFoundError(f"run {inp.run_id} is not one of workspace {ws}'s", field="run_id")


@declare(
    method="GET",
    path=XP,
    hints=READ,
    summary="List a workspace's experiment runs: a fork's lists its parent's before it.",
    in_actions=False,
)
async def experiment_list(svc: Service, inp: ExperimentListInput) -> ExperimentList:
    ws = inp.workspace_id
    # A terminated workspace's runs stay readable (its record is kept while it has snapshots);
    # one never made, or purged, is not found.
    record = await svc.driver.get(ws)
    store = ExperimentStore(svc.shared_store)
    runs = [Experiment(**run.model_dump()) for run in await store.runs(ws)]
    for run in runs:
        if run.state == "running":
            await _take_over(svc, run, record.state)
    forked_from = None
    lineage = record.lineage
    if lineage is not None:
        inherited, came_from = await _inherited(svc, store, lineage)
        forked_from = ForkedFrom(
            workspace_id=lineage.parent_workspace_id,
            snapshot_id=lineage.snapshot_id,
            run_id=came_from,
        )
        runs = inherited + runs
    return ExperimentList(runs=runs, forked_from=forked_from)


async def _take_over(svc: Service, run: Experiment, workspace_state: str) -> None:
    """A run recorded running: followed by this gateway from now on, or, its workspace no longer
    running, recorded lost with what was read of it."""
    if workspace_state == "running":
        # A no-op where this process follows it already (its claim).
        svc.spawn(follow_run(svc, RunRecord(**run.model_dump(exclude={"inherited_from"}))))
        return
    run.state = "lost"
    run.ended_at = run.ended_at or utc_now()
    run.error = f"its workspace was {workspace_state} before the run was seen to end"
    await ExperimentStore(svc.shared_store).write(
        RunRecord(**run.model_dump(exclude={"inherited_from"}))
    )


async def _inherited(
    svc: Service, store: ExperimentStore, lineage: Lineage
) -> tuple[list[Experiment], str | None]:
    """The parent's runs started before the fork's snapshot was taken, and the one of them going
    on, or last ended, then: the run the fork came from."""
    parent = lineage.parent_workspace_id
    taken = await _taken(svc, lineage)
    runs = [
        Experiment(**run.model_dump(), inherited_from=parent)
        for run in await store.runs(parent)
        if instant(run.started_at) <= taken
    ]
    return runs, (runs[-1].run_id if runs else None)


async def _taken(svc: Service, lineage: Lineage) -> datetime:
    """When the snapshot a fork was made from was taken (where its parent still lists it; else
    when the fork was made)."""
    taken = lineage.forked_at
    with contextlib.suppress(WorkspaceError):
        for snap in await svc.driver.list_snapshots(lineage.parent_workspace_id):
            if snap.snapshot_id == lineage.snapshot_id:
                taken = snap.created_at
    return instant(taken)


# The state of the workdir's repository, and the artifacts directory made, by the command's user
# (what its git says is what the run records: the workspace's word, bounded).
_PREPARE = (
    'mkdir -p -- "$1" || exit 3; cd -- "$2" 2>/dev/null || exit 0; '
    "head=$(git rev-parse --verify -q HEAD 2>/dev/null) || exit 0; "
    'echo "$head"; '
    'if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null | head -c 1)" ]; '
    "then echo dirty; else echo clean; fi"
)


async def _repository_state(
    svc: Service, ws: str, artifacts: str, workdir: str | None
) -> tuple[str | None, bool | None]:
    record = await svc.live_record(ws)
    quiet = PROGRESS.set(None)
    try:
        done = await run_to_end(
            svc,
            record,
            argv=[
                "sh",
                "-c",
                _PREPARE,
                "sh",
                host_path(record, artifacts),
                host_path(record, workdir) if workdir else record.root,
            ],
            env={"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"},
            timeout_seconds=60,
            cap=256,
            head_only=True,
            internal=True,
        )
    finally:
        PROGRESS.reset(quiet)
    lines = done.stdout.text().split()
    head = report_head(lines[0]) if lines else None
    if head is None:
        return None, None
    return head, (lines[1] == "dirty") if len(lines) > 1 else None


async def _plot_bytes(
    svc: Service, inp: ExperimentRef, body: AsyncIterator[bytes], headers: Mapping[str, str]
) -> RawReply | None:
    """REST's answer: the PNG itself, unless the client asks for JSON."""
    if "application/json" in headers.get("accept", ""):
        return None
    image = (await experiment_plot(svc, inp)).image

    async def chunks() -> AsyncIterator[bytes]:
        yield image

    return RawReply(chunks=chunks(), length=len(image), media_type="image/png")


@declare(
    method="GET",
    path=XP + "/{run_id}/plot",
    hints=READ,
    summary="Draw an experiment's run: its reported metrics and the workspace's CPU and "
    "memory over time, as a PNG.",
    limits="MCP: image content; REST: the PNG (Accept: application/json for this answer).",
    in_actions=False,
    raw=RawRest(serve=_plot_bytes, response_media=("image/png",)),
)
async def experiment_plot(svc: Service, inp: ExperimentRef) -> ExperimentPlot:
    run = await experiment_get(svc, inp)
    owner = run.inherited_from or run.workspace_id
    series = await ExperimentStore(svc.shared_store).series(owner, run.run_id)
    png = await render_png(run, series)
    drawn = [name for name, _ in panels(run, series)]
    plot = ExperimentPlot(
        run_id=run.run_id,
        state=run.state,
        panels=drawn,
        media_type="image/png",
        size_bytes=len(png),
    )
    return cast(ExperimentPlot, plot.carrying(png))
