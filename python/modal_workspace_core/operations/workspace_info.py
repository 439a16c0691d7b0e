"""A workspace as operations answer it (`Workspace`, with its latest metrics sample where that
costs nothing: `latest_metrics`), and the one workspace an idempotency key makes
(`once_per_key`): shared by the workspaces domain (create, list, get), the snapshots domain (a
resume answers a workspace; a fork is one, made once per key like a create) and the metrics
domain (a sample as `workspace_metrics` answers it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ..drivers.base import LifecycleNote, Lineage, Suspension, WorkspaceRecord
from ..errors import ConflictError, NotFoundError
from .machinery.fields import Output, derived_id

if TYPE_CHECKING:
    from ..runtime.service import Service

__all__ = [
    "SAMPLE_FIELDS",
    "MetricsSample",
    "Workspace",
    "latest_metrics",
    "metrics_sample",
    "once_per_key",
    "workspace_out",
]


# A metrics sample as its agent took it (docs/protocol.md, "Metrics"), passed on as it is: a
# model of its fields would cost every tool list that shows a workspace their schema.
MetricsSample = dict[str, Any]
SAMPLE_FIELDS = (
    "seq, timestamp, interval_seconds; cpu (percent of one core, cores, top: the 5 processes "
    "using most CPU with pid, name, cpu_percent, rss_bytes); memory (used_bytes, limit_bytes, "
    "oom_kills, rss_bytes, source); disk (total_bytes, used_bytes, free_bytes); processes; "
    "network (rx_bytes, tx_bytes); on GPU machines gpus (index, uuid, name, "
    "utilization_percent, memory_used_bytes, memory_total_bytes, temperature_celsius, "
    "power_watts, processes)"
)


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
    metrics: MetricsSample | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Its latest metrics sample, only when this server holds a channel to its "
        "agent already (for a while after the workspace was last used): getting a workspace "
        "opens none, keeps none open and resumes nothing (workspace_metrics does). Its fields: "
        f"{SAMPLE_FIELDS}.",
    )


def workspace_out(
    record: WorkspaceRecord,
    *,
    resumed_from: str | None = None,
    metrics: MetricsSample | None = None,
) -> Workspace:
    return Workspace.model_validate(
        {**record.model_dump(), "resumed_from": resumed_from, "metrics": metrics}
    )


async def latest_metrics(svc: Service, workspace_id: str) -> MetricsSample | None:
    """The workspace's latest metrics sample if its agent's channel is open already (and the
    workspace was used lately), else None: asking costs no channel, no resume and no use."""
    status = await svc.request_if_open(workspace_id, "metrics.status", {})
    return metrics_sample((status or {}).get("sample"))


def metrics_sample(sample: object) -> MetricsSample | None:
    """An agent's sample as answered, or None for none (or for what is not a sample: the
    stream also carries `reported` events, which an agent of this build never answers here)."""
    if not isinstance(sample, dict) or not isinstance(sample.get("seq"), int):
        return None
    if sample.get("type") != "metrics":
        return None
    return sample


# How long a gateway that lost the race for a key waits for the winner's workspace to show.
_KEYED_WAIT_SECONDS = 10.0


async def once_per_key(
    svc: Service, scope: str, key: str, make: Callable[[str], Awaitable[WorkspaceRecord]]
) -> WorkspaceRecord:
    """The workspace the idempotency `key` names within `scope`, made by `make` (given its id)
    the first time. The key decides the id (`derived_id`), so the driver's own uniqueness of ids
    (a Modal sandbox's name, a data-root directory) settles a race between two gateways, or two
    requests of one: the loser finds the winner's workspace. The key names that one workspace
    for good: once it is terminated, the key is refused, not reused."""
    workspace_id = derived_id("ws", scope, key, svc.settings.idempotency_secret)
    found = await _keyed(svc, workspace_id)
    if found is not None:
        return found
    try:
        return await make(workspace_id)
    except ConflictError:
        # Another request made it first: its workspace shows as soon as it is recorded.
        deadline = time.monotonic() + _KEYED_WAIT_SECONDS
        while time.monotonic() < deadline:
            found = await _keyed(svc, workspace_id)
            if found is not None:
                return found
            await asyncio.sleep(0.2)
        raise


async def _keyed(svc: Service, workspace_id: str) -> WorkspaceRecord | None:
    try:
        record = await svc.driver.get(workspace_id)
    except NotFoundError:
        return None
    if record.state == "terminated":
        raise ConflictError(
            f"this idempotency key made workspace {workspace_id}, which was terminated: resume "
            "it (workspace_resume) or use another key",
            field="idempotency_key",
        )
    return record
