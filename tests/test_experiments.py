"""Experiments on the local driver with the real agent: a run started in a repository cloned from
the test git server (standing in for GitHub) is recorded with the repository's HEAD and whether
it had changes, how it ended, its wall time, and the metrics its command printed as `::metric`
lines (garbage counted, never raised); the record is read back by a gateway that restarted (and
one that restarted while the run went on takes it over), after the workspace was terminated
with a kept snapshot, and by a fork of that snapshot, which names the run it came from."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import modal_workspace_core as mwc
import pytest
from modal_workspace_core.config import load_settings
from modal_workspace_core.errors import InvalidArgumentError, NotFoundError
from modal_workspace_core.operations.experiment_records import ExperimentStore
from modal_workspace_core.operations.experiments import Experiment, ExperimentList
from modal_workspace_core.operations.machinery.fitting import fit_json
from modal_workspace_core.runtime.call import ANSWER_BY
from modal_workspace_core.surfaces.rest.routes import ACTIONS_RESPONSE_CHARS
from support.git_server import GitServer

SLUG = "octo/hello"
# A run that reports three values of `loss` (one line in JSON), a step, a learning rate on stderr,
# a line that is not one, and a line that says it is and is not, then fails with 3. What is
# `last` follows arrival, and two pipes have no order between them: a metric on stdout and stderr
# at once would have no `last` a test could rely on, so stderr carries a name of its own.
REPORTING = (
    "echo '::metric loss=0.9 step=1'; echo '::metric lr=0.01' >&2; "
    "echo '::metric loss=0.5 step=2'; "
    "echo '::metric {\"loss\": 0.31, \"step\": 3}'; echo '::metric loss=oops'; "
    "echo 'an ordinary line'; echo done > \"$MWC_ARTIFACTS_DIR/out.txt\"; exit 3"
)


# A core kept busy for three seconds.
BURN_3_SECONDS = "python3 -c 'import time\nend = time.time() + 3\nwhile time.time() < end: pass'"


@pytest.fixture
def gateway(tmp_path: Path, git_server: GitServer) -> Callable[[], Any]:
    """Opens a gateway (a `Workspaces` client) on one data root: each one a restart."""
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"github": {"GH_TOKEN": git_server.token}}))
    env = {
        **git_server.gateway_env,
        "MODAL_WORKSPACE_JANITOR_SECONDS": "0",
        "MODAL_WORKSPACE_ALLOWED_SECRETS": "github",
        "MODAL_WORKSPACE_LOCAL_SECRETS_FILE": str(secrets),
    }

    @asynccontextmanager
    async def opened() -> AsyncIterator[mwc.Workspaces]:
        async with mwc.Workspaces(settings=load_settings(env, data_root=tmp_path / "data")) as w:
            yield w

    return opened


async def cloned(wss: mwc.Workspaces) -> mwc.Workspace:
    ws = await wss.create(keep=True)
    started = await wss.call(
        "repo_clone", workspace_id=ws.id, repository=SLUG, use_github_token=True
    )
    async for _ in ws.follow(started.model_dump()["exec_id"]):
        pass
    return ws


async def ended(wss: mwc.Workspaces, ws: str, run_id: str, timeout: float = 60) -> Experiment:
    async with asyncio.timeout(timeout):
        while True:
            run = cast(Experiment, await wss.call("experiment_get", workspace_id=ws, run_id=run_id))
            if run.state != "running":
                return run
            await asyncio.sleep(0.2)


async def test_a_run_records_its_repository_its_end_and_what_it_reported(
    gateway: Callable[[], Any], git_server: GitServer
) -> None:
    async with gateway() as wss:
        ws = await cloned(wss)
        started = cast(
            Experiment,
            await wss.call(
                "experiment_start",
                workspace_id=ws.id,
                command=REPORTING,
                workdir="hello",
                name="first try",
            ),
        )
        assert (started.state, started.head, started.dirty) == (
            "running",
            git_server.head(SLUG, "main"),
            False,
        )
        run = await ended(wss, ws.id, started.run_id)
        assert (run.state, run.returncode, run.name) == ("finished", 3, "first try")
        assert run.wall_seconds is not None and 0 <= run.wall_seconds < 60
        loss = run.metrics["loss"]
        assert (loss.last, loss.min, loss.max, loss.count) == (0.31, 0.31, 0.9, 3)
        assert run.metrics["step"].last == 3
        assert run.metrics["lr"].last == 0.01
        assert run.metric_lines_refused == 1
        out = await ws.exec(f"cat {run.artifacts_dir}/out.txt")
        assert out.stdout == "done\n"

        # A change to a tracked file: the next run says the tree was dirty.
        await ws.exec("echo more >> README.md", workdir="hello")
        second = cast(
            Experiment,
            await wss.call("experiment_start", workspace_id=ws.id, command="true", workdir="hello"),
        )
        assert second.dirty is True
        await ended(wss, ws.id, second.run_id)
        # Outside a repository there is no HEAD to record.
        third = cast(
            Experiment, await wss.call("experiment_start", workspace_id=ws.id, command="true")
        )
        assert (third.head, third.dirty) == (None, None)
        await ended(wss, ws.id, third.run_id)
        listed = cast(ExperimentList, await wss.call("experiment_list", workspace_id=ws.id))
        assert [r.run_id for r in listed.runs] == [started.run_id, second.run_id, third.run_id]
        assert listed.forked_from is None

    # A restarted gateway reads the same records.
    async with gateway() as wss:
        again = cast(
            Experiment,
            await wss.call("experiment_get", workspace_id=ws.id, run_id=started.run_id),
        )
        assert again.model_dump() == run.model_dump()
        with pytest.raises(NotFoundError, match="run_id"):
            await wss.call("experiment_get", workspace_id=ws.id, run_id="xp-" + "0" * 32)
        with pytest.raises(InvalidArgumentError):
            await wss.call("experiment_get", workspace_id=ws.id, run_id="ex-" + "0" * 32)
        # Purged (no snapshot kept), the workspace's runs go with it.
        await wss.call("workspace_terminate", workspace_id=ws.id, purge=True)
        with pytest.raises(NotFoundError):
            await wss.call("experiment_list", workspace_id=ws.id)
        assert await ExperimentStore(wss.service.shared_store).runs(ws.id) == []


async def test_a_run_outlives_its_gateway_and_its_workspace_and_travels_with_a_fork(
    gateway: Callable[[], Any],
) -> None:
    async with gateway() as wss:
        ws = await cloned(wss)
        # Runs past this gateway: reports, waits for a file, reports again.
        started = cast(
            Experiment,
            await wss.call(
                "experiment_start",
                workspace_id=ws.id,
                command="echo '::metric acc=0.5'; while [ ! -e go ]; do sleep 0.1; done; "
                "echo '::metric acc=0.75'",
                workdir="hello",
            ),
        )
        async with asyncio.timeout(30):
            while (
                "acc"
                not in (
                    await wss.call("experiment_get", workspace_id=ws.id, run_id=started.run_id)
                ).model_dump()["metrics"]
            ):
                await asyncio.sleep(0.3)

    async with gateway() as wss:
        ws = await wss.get(ws.id)
        # This gateway takes the run over at its first read, from the start of its output.
        assert (
            await wss.call("experiment_get", workspace_id=ws.id, run_id=started.run_id)
        ).model_dump()["state"] == "running"
        await ws.exec("touch go", workdir="hello")
        run = await ended(wss, ws.id, started.run_id)
        assert (run.state, run.returncode) == ("finished", 0)
        assert (run.metrics["acc"].count, run.metrics["acc"].last) == (2, 0.75)

        # A run still going when its workspace ends with a kept snapshot: recorded lost.
        going = cast(
            Experiment,
            await wss.call("experiment_start", workspace_id=ws.id, command="sleep 600"),
        )
        terminated = await wss.call("workspace_terminate", workspace_id=ws.id, keep_snapshot=True)
        snapshot_id = terminated.model_dump()["snapshot_id"]
        assert snapshot_id is not None
        listed = cast(ExperimentList, await wss.call("experiment_list", workspace_id=ws.id))
        states = {r.run_id: r.state for r in listed.runs}
        assert states == {started.run_id: "finished", going.run_id: "lost"}

        # A fork of that snapshot lists the runs before it and names the one it came from.
        child = await wss.call("workspace_fork", workspace_id=ws.id, snapshot_id=snapshot_id)
        child_id = child.model_dump()["workspace_id"]
        of_child = cast(ExperimentList, await wss.call("experiment_list", workspace_id=child_id))
        assert of_child.forked_from is not None
        assert of_child.forked_from.run_id == going.run_id
        assert [(r.run_id, r.inherited_from) for r in of_child.runs] == [
            (started.run_id, ws.id),
            (going.run_id, ws.id),
        ]
        await (await wss.get(child_id)).terminate()


async def test_a_run_records_what_the_workspace_used_meanwhile(gateway: Callable[[], Any]) -> None:
    async with gateway() as wss:
        ws = await wss.create()
        await wss.call("workspace_metrics", workspace_id=ws.id, interval_seconds=0.5)
        started = cast(
            Experiment,
            await wss.call(
                "experiment_start",
                workspace_id=ws.id,
                command=BURN_3_SECONDS,
            ),
        )
        run = await ended(wss, ws.id, started.run_id)
        assert run.state == "finished", run
        system = run.system
        assert system is not None and system["samples"] >= 3, system
        assert system["cpu_percent_peak"] > 50 and system["memory_used_bytes_peak"] > 0
        assert "gpu_utilization_percent_mean" not in system  # no GPU here
        series = await ExperimentStore(wss.service.shared_store).series(ws.id, run.run_id)
        assert len(series.system["cpu_percent"]) == system["samples"]
        assert all(0 <= at <= 10 for at, _ in series.system["cpu_percent"])
        await ws.terminate()


async def test_a_run_outlasts_the_deadline_of_the_call_that_started_it(
    gateway: Callable[[], Any],
) -> None:
    """GPT Actions give a call 45 s: the run it starts, and its follower, go on past that."""
    async with gateway() as wss:
        ws = await wss.create()
        token = ANSWER_BY.set(time.monotonic() + 1)
        try:
            started = cast(
                Experiment,
                await wss.call(
                    "experiment_start",
                    workspace_id=ws.id,
                    command="sleep 3; echo '::metric done=1'",
                ),
            )
        finally:
            ANSWER_BY.reset(token)
        run = await ended(wss, ws.id, started.run_id)
        assert (run.state, run.returncode, run.metrics["done"].last) == ("finished", 0, 1.0)
        await ws.terminate()


def test_a_long_list_of_runs_keeps_the_newest_within_the_rest_bound() -> None:
    """A workspace with many runs (each command up to 64 KiB) still gets an answer under GPT
    Actions' bound: the newest runs, and `truncated`."""
    runs = [
        Experiment(
            run_id=f"xp-{i:032x}",
            workspace_id="ws-" + "0" * 32,
            command="x" * 20_000,
            exec_id=f"ex-{i:032x}",
            artifacts_dir="/workspace/.experiments",
            started_at=f"2026-12-03T00:00:{i:02d}.000Z",
        )
        for i in range(12)
    ]
    text = fit_json(ExperimentList(runs=runs), ACTIONS_RESPONSE_CHARS)
    fitted = json.loads(text)
    assert len(text) <= ACTIONS_RESPONSE_CHARS and fitted["truncated"] is True
    kept = [r["run_id"] for r in fitted["runs"]]
    assert kept and kept == [r.run_id for r in runs][-len(kept) :]
