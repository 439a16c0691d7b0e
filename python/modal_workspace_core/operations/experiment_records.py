"""Experiment runs as the deployment's shared store keeps them, so that a run outlives the gateway
that started it and the workspace's sandbox: under `experiments/<workspace id>/<run id>/`, the
run's `record` (what it ran, on what, and once it ended how it ended and what it reported) and
its `series` (the reported metrics over time, for plots). Keys are built from the gateway's own
ids only. Only the gateway writes them; what the workspace said (its git HEAD, its metric lines)
is recorded as the workspace reported it, bounded, and decides nothing.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from ..shared_store import SharedStore

__all__ = ["EXPERIMENTS", "ExperimentStore", "MetricSummary", "RunRecord", "RunSeries", "RunState"]

EXPERIMENTS = "experiments"

RunState = Literal["running", "finished", "failed", "cancelled", "timed_out", "lost"]


class MetricSummary(BaseModel):
    last: float = Field(description="The last value reported.")
    min: float
    max: float
    count: int = Field(description="How many values were reported.")


class RunRecord(BaseModel):
    run_id: str
    workspace_id: str
    name: str | None = None
    command: str
    workdir: str | None = None
    exec_id: str
    head: str | None = Field(
        default=None, description="The git HEAD of the workdir's repository at the start."
    )
    dirty: bool | None = Field(
        default=None, description="Whether its tracked files had changes then (null: no repo)."
    )
    resources: dict[str, Any] = {}
    artifacts_dir: str
    started_at: str
    state: RunState = "running"
    ended_at: str | None = None
    returncode: int | None = None
    error: str | None = None
    wall_seconds: float | None = None
    metrics: dict[str, MetricSummary] = Field(
        default={}, description="What the command reported (::metric lines): per name."
    )
    metric_lines_refused: int = 0
    system: dict[str, Any] | None = Field(
        default=None, description="The workspace's own use while it ran (the metrics stream)."
    )


class RunSeries(BaseModel):
    """The reported metrics over the run: per name, [seconds since its start, value] points."""

    points: dict[str, list[tuple[float, float]]] = {}
    # The workspace's own use over the run (`cpu_percent`, `memory_used_gib`, …), from its
    # metrics stream.
    system: dict[str, list[tuple[float, float]]] = {}


class ExperimentStore:
    """The runs of every workspace of a deployment."""

    def __init__(self, shared: SharedStore) -> None:
        self.shared = shared

    @staticmethod
    def _key(workspace_id: str, run_id: str, part: str) -> str:
        return f"{EXPERIMENTS}/{workspace_id}/{run_id}/{part}"

    async def write(self, run: RunRecord) -> None:
        await self.shared.write(
            self._key(run.workspace_id, run.run_id, "record"), run.model_dump_json().encode()
        )

    async def write_series(self, workspace_id: str, run_id: str, series: RunSeries) -> None:
        data = json.dumps(series.model_dump(), separators=(",", ":")).encode()
        await self.shared.write(self._key(workspace_id, run_id, "series"), data)

    async def run(self, workspace_id: str, run_id: str) -> RunRecord | None:
        raw = await self.shared.read(self._key(workspace_id, run_id, "record"))
        if raw is None:
            return None
        with contextlib.suppress(ValidationError, ValueError):
            return RunRecord.model_validate_json(raw)
        return None

    async def series(self, workspace_id: str, run_id: str) -> RunSeries:
        raw = await self.shared.read(self._key(workspace_id, run_id, "series"))
        if raw is not None:
            with contextlib.suppress(ValidationError, ValueError):
                return RunSeries.model_validate_json(raw)
        return RunSeries()

    async def runs(self, workspace_id: str) -> list[RunRecord]:
        """The workspace's runs, oldest first."""
        found = []
        for run_id in await self.shared.names(f"{EXPERIMENTS}/{workspace_id}"):
            run = await self.run(workspace_id, run_id)
            if run is not None:
                found.append(run)
        return sorted(found, key=lambda r: (r.started_at, r.run_id))

    async def forget(self, workspace_id: str) -> None:
        """Every run of the workspace (it was purged)."""
        await self.shared.remove(f"{EXPERIMENTS}/{workspace_id}")
