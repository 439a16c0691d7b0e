"""Templates as the deployment's shared store keeps them: one record per template (what
`template_create` was given), one per build, and the sweep's claims of its checks, all under
`templates/<name>/` (the name is held to the core's rule, `policy.template_name`, which every
key segment takes). Shared: the templates domain defines, lists and deletes them, a build
records itself, `workspace_create(template=…)` starts from the newest good build, and the sweep
checks them.

Two gateways never run two builds of one template at once: a build is numbered, and the one
atomic step of the store (`create`) gives each number to exactly one of them. A build records
its own progress (`write`: only its claimant writes it); a definition is written once.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ..drivers.base import SnapshotRecord
from ..shared_store import SharedStore

__all__ = [
    "TEMPLATES",
    "Build",
    "BuildState",
    "TemplateDefinition",
    "TemplateStore",
    "building",
    "check_window",
    "last_failure",
    "newest_ready",
    "parse_stamp",
]

# The folder every template's records live under.
TEMPLATES = "templates"

BuildState = Literal["building", "ready", "failed"]


class TemplateDefinition(BaseModel):
    """What `template_create` was given, every value canonical (checked by the core)."""

    name: str
    repository: str  # the canonical URL
    ref: str | None = None  # None: the remote's default branch
    setup_command: str | None = None
    setup_timeout_seconds: int
    resources: dict[str, Any] = {}
    use_github_token: bool = False
    created_at: str


class Build(BaseModel):
    """One build of a template: a workspace that cloned, ran the setup and was snapshotted."""

    number: int
    workspace_id: str  # the build's workspace (its snapshot's, once ready)
    state: BuildState
    reason: str  # why it was built: created, its branch moved, asked again
    started_at: str
    # Past it a build still `building` was lost with its gateway: it counts as failed.
    deadline: str
    ended_at: str | None = None
    head: str | None = None  # the commit it built, as the agent's own git reported it
    snapshot: SnapshotRecord | None = None  # set once ready
    progress_stream_id: str | None = None  # a task stream in the build's workspace
    error: str | None = None

    def lost(self, now: datetime) -> bool:
        """Still `building` past its deadline: its gateway stopped before it ended."""
        deadline = parse_stamp(self.deadline)
        return self.state == "building" and deadline is not None and now >= deadline


def parse_stamp(stamp: str | None) -> datetime | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def newest_ready(builds: list[Build]) -> Build | None:
    """The build new workspaces start from: the newest that ended well."""
    return next((b for b in reversed(builds) if b.state == "ready"), None)


def building(builds: list[Build], now: datetime | None = None) -> Build | None:
    """The build under way, if any (a lost one is not)."""
    now = now or datetime.now(UTC)
    newest = builds[-1] if builds else None
    if newest is None or newest.state != "building" or newest.lost(now):
        return None
    return newest


def last_failure(builds: list[Build], now: datetime | None = None) -> Build | None:
    """The newest build that failed (or was lost) after the newest good one: what went wrong
    since the template last built well."""
    now = now or datetime.now(UTC)
    for build in reversed(builds):
        if build.state == "ready":
            return None
        if build.state == "failed" or build.lost(now):
            return build
    return None


def check_window(now: datetime, interval: int) -> int:
    """The check interval `now` falls in: the sweep asks a template's remote once in each."""
    return int(now.timestamp()) // interval


def _number(name: str) -> int | None:
    return int(name) if name.isdigit() else None


class TemplateStore:
    """The templates' records in a deployment's shared store."""

    def __init__(self, store: SharedStore) -> None:
        self._store = store

    async def names(self) -> list[str]:
        """Every template's name (a folder whose definition is gone, a build that finished
        after its template was deleted, included: `definition` says None for it)."""
        return await self._store.names(TEMPLATES)

    async def definition(self, name: str) -> TemplateDefinition | None:
        data = await self._store.read(f"{TEMPLATES}/{name}/definition")
        if data is None:
            return None
        return TemplateDefinition.model_validate_json(data)

    async def define(self, definition: TemplateDefinition) -> bool:
        """Records a new template; False when one of that name exists (it is kept)."""
        key = f"{TEMPLATES}/{definition.name}/definition"
        return await self._store.create(key, definition.model_dump_json().encode())

    async def builds(self, name: str) -> list[Build]:
        """The template's builds, oldest first; a record that does not read as one is skipped."""
        names = await self._store.names(self._builds(name))
        numbers = sorted(n for n in map(_number, names) if n is not None)
        found = []
        for number in numbers:
            data = await self._store.read(self._build_key(name, number))
            if data is None:
                continue  # removed meanwhile
            with contextlib.suppress(ValidationError):
                found.append(Build.model_validate_json(data))
        return found

    async def claim_build(self, name: str, build: Build) -> bool:
        """Records `build` under its number, only where no build of that number is: of two
        gateways starting build N at once, exactly one gets True."""
        key = self._build_key(name, build.number)
        return await self._store.create(key, build.model_dump_json().encode())

    async def save_build(self, name: str, build: Build) -> None:
        """The build's progress, written by the gateway that claimed it (and no other)."""
        key = self._build_key(name, build.number)
        await self._store.write(key, build.model_dump_json().encode())

    async def forget_build(self, name: str, number: int) -> None:
        await self._store.remove(self._build_key(name, number))

    async def claim_check(self, name: str, window: int) -> bool:
        """Whether this gateway asks the template's remote in check window `window`: the first
        to claim it of every gateway. Older claims are removed by the winner."""
        folder = f"{TEMPLATES}/{name}/checks"
        if not await self._store.create(f"{folder}/{window}", b"{}"):
            return False
        for older in await self._store.names(folder):
            if older.isdigit() and int(older) < window:
                await self._store.remove(f"{folder}/{older}")
        return True

    async def remove(self, name: str) -> None:
        """The template and all its records."""
        await self._store.remove(f"{TEMPLATES}/{name}")

    @staticmethod
    def _builds(name: str) -> str:
        return f"{TEMPLATES}/{name}/builds"

    @classmethod
    def _build_key(cls, name: str, number: int) -> str:
        # Zero-padded, so that the store's sorted names are the builds in order.
        return f"{cls._builds(name)}/{number:08d}"
