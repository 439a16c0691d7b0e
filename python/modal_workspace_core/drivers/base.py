"""The driver contract: how a workspace is created, found, tagged, reached and destroyed.

Everything else (exec, git, files, watch) is the workspace agent's, reached through the channel
that `connect` opens, so the service above never asks which driver it is talking to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel

if TYPE_CHECKING:
    from ..agent_client import AgentClient

__all__ = ["Driver", "WorkspaceRecord", "WorkspaceSpec"]


class WorkspaceRecord(BaseModel):
    """A workspace as its driver knows it. Reading one never runs anything in the workspace."""

    workspace_id: str
    driver: str
    root: str  # "/workspace" as seen by commands
    created_at: str
    tags: dict[str, str]
    state: Literal["running", "stopped", "terminated"]
    resources: dict[str, Any] = {}
    block_network: bool = False


class WorkspaceSpec(BaseModel):
    """What to create: every value here has already passed the service's policies."""

    env: dict[str, str] = {}
    tags: dict[str, str] = {}
    block_network: bool = False
    resources: dict[str, Any] = {}
    secret_env: dict[str, str] = {}  # resolved secret values


class Driver(Protocol):
    name: str

    async def create(self, workspace_id: str, spec: WorkspaceSpec) -> WorkspaceRecord: ...
    async def get(self, workspace_id: str) -> WorkspaceRecord: ...  # raises NotFoundError
    async def list(self) -> list[WorkspaceRecord]: ...
    async def set_tags(self, workspace_id: str, tags: dict[str, str]) -> WorkspaceRecord: ...
    async def connect(self, workspace_id: str) -> AgentClient: ...  # an open channel
    async def destroy(self, workspace_id: str) -> None: ...
    async def close(self) -> None: ...
