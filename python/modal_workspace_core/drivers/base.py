"""The driver contract: how a workspace is created, found, tagged, reached and destroyed.

Everything else (exec, git, files, watch) is the workspace agent's, reached through the channel
that `connect` opens, so the service above never asks which driver it is talking to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel

from ..errors import PermissionDeniedError

if TYPE_CHECKING:
    from ..channel.client import AgentClient
    from ..config import Settings

__all__ = [
    "Driver",
    "ExecSecret",
    "GatewaySecrets",
    "SecretSource",
    "WorkspaceRecord",
    "WorkspaceSecrets",
    "WorkspaceSpec",
    "secret_source",
]


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
    secret_env: dict[str, str] = {}  # secret values the gateway holds, for every command
    # Secrets the provider holds and puts into the workspace by name (never through the gateway):
    # their variables are every command's ...
    secret_names: list[str] = []
    # Of the secrets above, name -> the variables the operator's allowlist says it holds: the
    # provider checks they are there, and the agent redacts their values from all output.
    secret_keys: dict[str, list[str]] = {}


class WorkspaceSecrets(BaseModel):
    """How a new workspace receives the allowlisted secrets it asked for (`WorkspaceSpec`)."""

    secret_env: dict[str, str] = {}
    secret_names: list[str] = []
    secret_keys: dict[str, list[str]] = {}


class ExecSecret(BaseModel):
    """How one exec step receives one secret variable: the gateway holds the value (`env`, and
    `redact` lists it for the agent's redaction). It is never in an argv, a URL, a file or an
    event."""

    env: dict[str, str] = {}
    redact: list[str] = []


class SecretSource(Protocol):
    """A driver's way of resolving allowlisted secret names (already checked by the service)."""

    def for_workspace(self, names: Sequence[str]) -> WorkspaceSecrets: ...

    def for_exec(self, secret: str, key: str, as_env: str) -> ExecSecret:
        """Variable `key` of secret `secret`, as variable `as_env` of one exec."""
        ...


class GatewaySecrets:
    """Secret values the gateway itself holds (`MODAL_WORKSPACE_LOCAL_SECRETS_FILE`): what a
    driver without a secret store of its own (the local driver) uses."""

    def __init__(self, values: Mapping[str, Mapping[str, str]]) -> None:
        self._values = values

    def _secret(self, name: str, field: str) -> Mapping[str, str]:
        values = self._values.get(name)
        if values is None:
            raise PermissionDeniedError(
                f"{field}: secret {name!r} is allowlisted but has no values configured "
                "(MODAL_WORKSPACE_LOCAL_SECRETS_FILE)",
                field=field,
            )
        return values

    def for_workspace(self, names: Sequence[str]) -> WorkspaceSecrets:
        env: dict[str, str] = {}
        for i, name in enumerate(names):
            env.update(self._secret(name, f"secret_names[{i}]"))
        return WorkspaceSecrets(secret_env=env)

    def for_exec(self, secret: str, key: str, as_env: str) -> ExecSecret:
        value = self._secret(secret, "use_github_token").get(key)
        if not value:
            raise PermissionDeniedError(
                f"the secret {secret!r} has no {key} value configured", field="use_github_token"
            )
        return ExecSecret(env={as_env: value}, redact=[value])


class Driver(Protocol):
    """What the service needs of a place to run workspaces. A driver whose workspaces may have
    a root other than `/workspace` also says `roots_vary = True` (the service then asks their
    records which one; every other driver's is `/workspace`)."""

    name: str

    async def create(self, workspace_id: str, spec: WorkspaceSpec) -> WorkspaceRecord: ...
    async def get(self, workspace_id: str) -> WorkspaceRecord: ...  # raises NotFoundError
    async def list(self) -> list[WorkspaceRecord]: ...
    async def set_tags(self, workspace_id: str, tags: dict[str, str]) -> WorkspaceRecord: ...
    async def connect(self, workspace_id: str) -> AgentClient: ...  # an open channel
    async def destroy(self, workspace_id: str) -> None: ...
    async def close(self) -> None: ...


def secret_source(driver: Driver, settings: Settings) -> SecretSource:
    """The driver's own `secret_source(settings)` where it has a secret store (Modal: secrets
    stay in Modal and reach the sandbox by name), else the values the gateway holds."""
    own = getattr(driver, "secret_source", None)
    if own is not None:
        source: SecretSource = own(settings)
        return source
    return GatewaySecrets(settings.secret_values)
