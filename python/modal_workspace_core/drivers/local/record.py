"""A local workspace's record as the driver keeps it (`workspace_records.py`) tells it: the
contract's `WorkspaceRecord`, its state, the refusal to reach one that only a resume starts again,
and the marker every process of its sandbox carries. Shared by the driver and its lifecycle part.
"""

from __future__ import annotations

from typing import Any

from ...errors import ConflictError, NotFoundError
from ..base import WorkspaceRecord
from . import daemon
from .launch import WORKSPACE_ID_ENV
from .store import WorkspaceDir

__all__ = ["as_record", "check_live", "live_state", "process_marker"]


def as_record(meta: dict[str, Any], state: str) -> WorkspaceRecord:
    return WorkspaceRecord.model_validate(
        {**meta, "state": state, "ended_at": meta.get("terminated_at")}
    )


def process_marker(workspace_id: str) -> str:
    return f"{WORKSPACE_ID_ENV}={workspace_id}"


def live_state(ws: WorkspaceDir, meta: dict[str, Any]) -> str:
    if meta.get("terminated_at"):
        return "terminated"
    if meta.get("suspension"):
        return "suspended"
    # Cheap and local: is the recorded daemon process alive? (`connect` restarts a stopped one.)
    return "running" if daemon.running(ws.pid_file) else "stopped"


def check_live(meta: dict[str, Any]) -> None:
    """Refuses to reach an agent that only a resume may start again."""
    workspace_id = meta.get("workspace_id", "")
    if meta.get("terminated_at"):
        raise NotFoundError(f"workspace {workspace_id} was terminated", field="workspace_id")
    if meta.get("suspension"):
        raise ConflictError(
            f"workspace {workspace_id} is suspended; resume it first", field="workspace_id"
        )
