"""A workspace's metrics: the latest sample of its agent's metrics stream and the stream's id
(followed with `stream_events`), and the interval the agent samples at."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import Field

from ..errors import ConflictError, InvalidArgumentError
from .machinery.fields import Input, Output, WorkspaceId
from .machinery.table import SETTING, WS, Declarations
from .workspace_info import SAMPLE_FIELDS, MetricsSample, metrics_sample

if TYPE_CHECKING:
    from ..runtime.service import Service

declare = Declarations()


class MetricsInput(Input):
    workspace_id: WorkspaceId
    interval_seconds: float | None = Field(
        None, ge=0.5, le=60, description="Set the sampling interval (default 2)."
    )


class WorkspaceMetrics(Output):
    stream_id: str = Field(
        description="The metrics stream (mt-…): read its samples with stream_events."
    )
    interval_seconds: float | None = Field(description="How often it is sampled.")
    sample: MetricsSample | None = Field(
        description=f"The latest sample; null before the first. Its fields: {SAMPLE_FIELDS}."
    )


@declare(
    method="POST",
    path=WS + "/metrics",
    hints=SETTING,
    summary="Get a workspace's latest metrics sample and its stream_id.",
    # GPT Actions takes 30 operations, and a chat asks a workspace what it does through
    # workspace_get, which carries the latest sample when it is at hand.
    in_actions=False,
)
async def workspace_metrics(svc: Service, inp: MetricsInput) -> WorkspaceMetrics:
    op, args = "metrics.status", dict[str, Any]()
    if inp.interval_seconds is not None:
        op, args = "metrics.set", {"interval_seconds": inp.interval_seconds}
    try:
        result, _ = await svc.request(inp.workspace_id, op, args)
    except InvalidArgumentError as e:
        # An agent that does not know the op refuses it naming `op`.
        if e.field == "op":
            raise ConflictError(
                f"workspace {inp.workspace_id}'s agent keeps no metrics (it predates them); "
                "a workspace started since has them",
                field="workspace_id",
            ) from None
        raise
    return _answer(result)


def _answer(result: dict[str, Any]) -> WorkspaceMetrics:
    return WorkspaceMetrics(
        stream_id=str(result.get("stream_id") or ""),
        interval_seconds=result.get("interval_seconds"),
        sample=metrics_sample(result.get("sample")),
    )
