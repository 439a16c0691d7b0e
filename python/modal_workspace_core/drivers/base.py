"""The driver contract: how a workspace is created, found, tagged, reached and destroyed.

Everything else (exec, git, files, watch) is the workspace agent's, reached through the channel
that `connect` opens, so the service above never asks which driver it is talking to.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, Field

from ..errors import PermissionDeniedError

if TYPE_CHECKING:
    from ..channel.client import AgentClient
    from ..config import Settings
    from ..shared_store import SharedStore

__all__ = [
    "LIFECYCLE_SNAPSHOTS_KEPT",
    "MAX_LIFECYCLE_NOTES",
    "MAX_LOST_EXECS_NAMED",
    "MAX_SNAPSHOTS",
    "Driver",
    "ExecSecret",
    "GatewaySecrets",
    "LifecycleNote",
    "Lineage",
    "Progress",
    "SecretSource",
    "SnapshotKind",
    "SnapshotRecord",
    "SnapshotSpec",
    "SuspendReason",
    "Suspension",
    "WorkspaceRecord",
    "WorkspaceSecrets",
    "WorkspaceSpec",
    "secret_source",
]


# Why a snapshot was taken: asked for, left by the sandbox's end, before an idle suspend, or
# ahead of the hard lifetime.
SnapshotKind = Literal["manual", "exit", "idle", "safety"]
# Why a workspace is suspended (its files kept in a snapshot, nothing running).
SuspendReason = Literal["idle", "lifetime", "out_of_memory", "terminated", "failed_to_start"]
# How a long driver step reports: bytes done so far, and the total when it is known.
Progress = Callable[[int, int | None], Coroutine[Any, Any, None]]


def utc_now() -> str:
    """Now as the records write it: RFC 3339, UTC, milliseconds, `Z`."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# The most snapshots a workspace keeps that were asked for (`workspace_snapshot`, a fork's),
# and the most the lifecycle keeps of its own (exit, idle, safety: the oldest go first), so
# that a workspace's snapshots, and their list, stay bounded on every driver.
MAX_SNAPSHOTS = 16
LIFECYCLE_SNAPSHOTS_KEPT = 4


class SnapshotSpec(BaseModel):
    """What to snapshot: every value has passed the service's checks."""

    snapshot_id: str  # sn-…, chosen by the service
    kind: SnapshotKind = "manual"
    label: str = ""
    ttl_seconds: int | None = None  # None: kept until deleted
    repos: dict[str, str] = {}  # each recorded repository's path -> its git HEAD now

    def expires_at(self, created: datetime) -> str | None:
        """When a snapshot taken at `created` expires (seconds, `Z`); None: never."""
        if self.ttl_seconds is None:
            return None
        expires = created + timedelta(seconds=self.ttl_seconds)
        return expires.isoformat(timespec="seconds").replace("+00:00", "Z")


class SnapshotRecord(BaseModel):
    """A snapshot of a workspace's files, as its driver keeps it (beside the workspace, never
    inside it: nothing a command writes can forge or change one)."""

    snapshot_id: str
    workspace_id: str
    kind: SnapshotKind
    label: str = ""
    created_at: str
    expires_at: str | None = None  # None: kept until deleted
    size_bytes: int | None = None
    repos: dict[str, str] = {}
    tags: dict[str, str] = {}  # the workspace's tags when it was taken: a resume restores them

    def expired(self, now: datetime | None = None) -> bool:
        if self.expires_at is None:
            return False
        expires = datetime.fromisoformat(self.expires_at.replace("Z", "+00:00"))
        return (now or datetime.now(UTC)) >= expires


class Lineage(BaseModel):
    """Where a forked workspace came from (a template's workspace is a fork of its build)."""

    parent_workspace_id: str = Field(description="The workspace it was forked from.")
    snapshot_id: str = Field(description="The parent's snapshot it was made from.")
    repos: dict[str, str] = Field(
        default={}, description="The parent's repositories (path -> git HEAD) in that snapshot."
    )
    forked_at: str = Field(description="When it was forked (RFC 3339, UTC).")
    template: str | None = Field(
        default=None, description="For a workspace made from a template: the template's name."
    )
    template_build: int | None = Field(
        default=None, description="And the number of the template's build it started from."
    )


def failed_start(workspace_id: str, detail: str) -> str:
    """What a caller is told of a workspace that failed to start: why, and that resuming would
    only start the same thing again."""
    why = f": {detail}" if detail else ""
    return (
        f"workspace {workspace_id} failed to start{why}. It cannot run as it is: terminate it, "
        "or fix the cause (its image, its resources) and create a new one"
    )


class Suspension(BaseModel):
    """Why a workspace is not running although its files are kept, and where they are."""

    reason: SuspendReason = Field(
        description="idle, lifetime, out_of_memory, terminated or failed_to_start."
    )
    at: str = Field(description="When it was suspended (RFC 3339, UTC).")
    snapshot_id: str | None = Field(
        default=None, description="The snapshot a resume starts from; null: none was left."
    )
    detail: str = Field(
        default="", description="More on why: for failed_to_start, the last lines of stderr."
    )


class LifecycleNote(BaseModel):
    """One thing the gateway's lifecycle did to a workspace on its own (an idle suspend, a
    safety snapshot, an expired snapshot deleted), kept on the workspace for its owner to see."""

    at: str = Field(description="When (RFC 3339, UTC).")
    action: str = Field(description="suspended, snapshot, snapshot_deleted, purged or resumed.")
    detail: str = Field(default="", description="What and why, in a sentence.")
    snapshot_id: str | None = Field(default=None, description="resumed: from this snapshot.")
    lost_execs: list[str] = Field(
        default=[], description="resumed: execs that were running when it ended (lost)."
    )


# The most lost execs a resume's note names (it says how many more there were).
MAX_LOST_EXECS_NAMED = 8


# The most lifecycle notes a workspace keeps (the oldest go first).
MAX_LIFECYCLE_NOTES = 20


class WorkspaceRecord(BaseModel):
    """A workspace as its driver knows it. Reading one never runs anything in the workspace."""

    workspace_id: str
    driver: str
    root: str  # "/workspace" as seen by commands
    created_at: str
    tags: dict[str, str]
    # stopped: the local daemon is down (the next use restarts it); suspended: nothing runs and
    # the files are in a snapshot (`suspension`); terminated: ended for good (its snapshots,
    # when kept, can still be resumed).
    state: Literal["running", "stopped", "suspended", "terminated"]
    resources: dict[str, Any] = {}
    block_network: bool = False
    lineage: Lineage | None = None
    suspension: Suspension | None = None
    # When what runs now started (created or last resumed): lifetimes count from here.
    started_at: str | None = None
    # When a terminated workspace whose snapshots are kept was terminated.
    ended_at: str | None = None
    lifecycle: list[LifecycleNote] = []


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
    records which one; every other driver's is `/workspace`). One whose host starts helper
    processes for its workspaces also has `async end_strays()`, which ends those that outlived
    their workspace's sandbox (the lifecycle sweep calls it). One that keeps sandboxes started
    ahead of creates has `async keep_warm()`, background work while it serves. One that can
    open a channel to a workspace it made moments ago without looking it up has
    `just_made(workspace_id)`, the record its create answered (or None). One that attaches the
    GPU `resources.gpu` asks for says `attaches_gpus = True`: the service then holds the request
    to the GPU allowlist before anything is looked up; any other driver refuses the field.
    A workspace's preview ports (`resources.ports`) are reached one of two ways: a driver whose
    provider publishes them itself has `async preview_url(workspace_id, port)` (Modal: the
    sandbox's tunnel), else one has `async open_port(workspace_id, port)`, a byte stream
    (`asyncio.StreamReader`, `asyncio.StreamWriter`) to the port on the workspace's loopback
    that the gateway's preview proxy carries a browser's requests over (local: the agent's
    relay)."""

    name: str
    # Whether `workspace_terminate` keeps a snapshot unless told otherwise (Modal: a sandbox
    # costs nothing once ended, and its files are otherwise gone).
    keeps_snapshots: bool
    # Whether the provider ends a workspace idle past its `idle_timeout_seconds` itself, leaving
    # a snapshot (Modal: the sandbox's idle timeout, then its exit snapshot). The sweep then
    # leaves idleness alone: a gateway knows only its own calls (several may serve one
    # workspace), and looking would itself be use (a channel keeps a sandbox active).
    ends_idle_workspaces: bool
    # Host paths no answer may name (the local data root, where workspaces are isolated): the
    # service replaces them in every error's message, after each driver's own care.
    hidden_paths: tuple[str, ...]
    # What every gateway process of this deployment shares (the OAuth server's state): a SQLite
    # file in the local data root, a Volume on Modal.
    shared_store: SharedStore

    async def create(self, workspace_id: str, spec: WorkspaceSpec) -> WorkspaceRecord: ...
    async def get(self, workspace_id: str) -> WorkspaceRecord: ...  # raises NotFoundError
    async def list(self) -> list[WorkspaceRecord]:
        """Every workspace this gateway's deployment has, in any state (suspended and kept
        terminated ones too: the lifecycle sweep needs them)."""
        ...

    async def set_tags(self, workspace_id: str, tags: dict[str, str]) -> WorkspaceRecord: ...
    async def connect(self, workspace_id: str) -> AgentClient: ...  # an open channel
    async def destroy(self, workspace_id: str, *, keep_snapshots: bool = False) -> None:
        """Ends the workspace. With `keep_snapshots` its record stays (`terminated`) and so do
        its snapshots, so that it can be resumed; without, both go."""
        ...

    async def close(self) -> None: ...

    # Snapshots: the service picks ids and checks every value; a driver stores and restores.
    async def snapshot(
        self, workspace_id: str, spec: SnapshotSpec, progress: Progress | None = None
    ) -> SnapshotRecord:
        """Returns only once the snapshot exists and can be opened."""
        ...

    async def list_snapshots(self, workspace_id: str) -> builtins.list[SnapshotRecord]:
        """Every snapshot the workspace has, oldest first, expired ones included; the
        workspace may be suspended or terminated."""
        ...

    async def delete_snapshot(self, workspace_id: str, snapshot_id: str) -> None: ...

    async def resume(
        self, workspace_id: str, snapshot: SnapshotRecord, *, only_if_suspended: bool = False
    ) -> WorkspaceRecord:
        """The same workspace id running again from `snapshot` (one of its own, not expired):
        files, tags and repositories as they were; whatever ran before is ended first. An
        unreadable snapshot is a `ConflictError` naming it, never a fresh workspace. With
        `only_if_suspended`, one that runs (another gateway resumed it first) is a
        `ConflictError` and nothing changes."""
        ...

    async def fork(
        self, snapshot: SnapshotRecord, workspace_id: str, spec: WorkspaceSpec, lineage: Lineage
    ) -> WorkspaceRecord:
        """A new workspace `workspace_id` (made as `create` makes one, from `spec`) whose files
        are `snapshot`'s; its exec history starts empty."""
        ...

    async def suspend(
        self, workspace_id: str, reason: SuspendReason, snapshot_id: str | None
    ) -> WorkspaceRecord:
        """Ends what runs (daemon, sandbox) and keeps the record as `suspended`; a workspace
        that is not running (already suspended, terminated) is a `ConflictError`."""
        ...

    async def note(self, workspace_id: str, note: LifecycleNote) -> None:
        """Keeps `note` on the workspace's record (at most `MAX_LIFECYCLE_NOTES`, newest last);
        a workspace that no longer exists is ignored."""
        ...


def secret_source(driver: Driver, settings: Settings) -> SecretSource:
    """The driver's own `secret_source(settings)` where it has a secret store (Modal: secrets
    stay in Modal and reach the sandbox by name), else the values the gateway holds."""
    own = getattr(driver, "secret_source", None)
    if own is not None:
        source: SecretSource = own(settings)
        return source
    return GatewaySecrets(settings.secret_values)
