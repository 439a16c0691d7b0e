"""The runtime every operation shares: the driver, one agent channel per workspace, background
tasks, and the translation of every failure into the gateway's error model.

Handlers (the `ops_*` modules) call `request`/`read_events` here and never see a driver's type.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextvars import ContextVar
from typing import Any

from . import policy
from ._core import PolicyError
from .config import Settings
from .drivers.base import Driver, WorkspaceRecord
from .errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    TimeoutError_,
    UpstreamError,
    WorkspaceError,
    from_agent_error,
    from_policy_error,
)
from .models import WORKSPACE_ROOT

__all__ = ["PROGRESS", "Service", "translate_error"]

log = logging.getLogger("modal_workspace_core.service")

# Set by a transport that can carry progress (MCP over SSE) for the duration of one call:
# long-running handlers report (bytes of output so far, the latest line) through it.
Reporter = Callable[[float, str], Awaitable[None]]
PROGRESS: ContextVar[Reporter | None] = ContextVar("PROGRESS", default=None)


def _agent_error_fields(exc: BaseException) -> tuple[str, str] | None:
    # The agent client raises `AgentError(code, message)`; matched by shape so that the service
    # does not depend on the client's import path.
    code = getattr(exc, "code", None)
    if isinstance(code, str) and not isinstance(exc, WorkspaceError):
        message = getattr(exc, "message", None)
        return code, message if isinstance(message, str) else str(exc)
    return None


def translate_error(exc: BaseException, field: str | None = None) -> WorkspaceError:
    """Any failure below the service, as the error a caller sees."""
    if isinstance(exc, WorkspaceError):
        return exc
    if isinstance(exc, PolicyError):
        return from_policy_error(exc, field or "input")
    agent = _agent_error_fields(exc)
    if agent is not None:
        return from_agent_error(*agent, field=field)
    if isinstance(exc, TimeoutError):
        return TimeoutError_("the workspace did not answer in time; try again")
    if isinstance(exc, ConnectionError | EOFError | OSError):
        return UpstreamError("the channel to the workspace agent failed; try again")
    log.exception("unexpected failure", exc_info=exc)
    return UpstreamError(f"unexpected failure in the gateway ({type(exc).__name__})")


class Service:
    """The state behind the operation table: one per server (or per `Workspaces` client)."""

    def __init__(self, driver: Driver, settings: Settings) -> None:
        self.driver = driver
        self.settings = settings
        self._clients: dict[str, Any] = {}
        self._connect_locks: dict[str, asyncio.Lock] = {}
        self._tag_locks: dict[str, asyncio.Lock] = {}
        self.create_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    # --- workspaces and channels ----------------------------------------------------------------

    async def record(self, workspace_id: str) -> WorkspaceRecord:
        record = await self.driver.get(workspace_id)
        if record.state == "terminated":
            raise NotFoundError(f"workspace {workspace_id} was terminated", field="workspace_id")
        return record

    async def running(self, workspace_id: str) -> WorkspaceRecord:
        record = await self.record(workspace_id)
        if record.state != "running":
            raise InvalidArgumentError(
                f"workspace {workspace_id} is {record.state}; it must be running",
                field="workspace_id",
            )
        return record

    async def agent(self, workspace_id: str) -> Any:
        """The open channel to the workspace's agent, opened on first use and then reused."""
        lock = self._connect_locks.setdefault(workspace_id, asyncio.Lock())
        async with lock:
            client = self._clients.get(workspace_id)
            if client is not None and not getattr(client, "closed", False):
                return client
            await self.running(workspace_id)
            client = await self.driver.connect(workspace_id)
            self._clients[workspace_id] = client
            return client

    async def drop_agent(self, workspace_id: str) -> None:
        client = self._clients.pop(workspace_id, None)
        if client is not None:
            await _close_quietly(client)

    async def request(
        self, workspace_id: str, op: str, args: Mapping[str, Any], payload: bytes = b""
    ) -> tuple[dict[str, Any], bytes]:
        """One agent request. A channel failure drops the channel, so the next call reconnects."""
        client = await self.agent(workspace_id)
        try:
            result, data = await client.request(op, dict(args), payload)
        except Exception as exc:
            if _agent_error_fields(exc) is None:
                await self.drop_agent(workspace_id)
            raise translate_error(exc) from None
        return dict(result or {}), bytes(data or b"")

    async def read_events(
        self,
        workspace_id: str,
        stream: str,
        cursor: int,
        *,
        max_events: int,
        max_bytes: int,
        wait_seconds: float,
    ) -> dict[str, Any]:
        """One page of a stream as a plain dict (the JSON form of `Page`)."""
        client = await self.agent(workspace_id)
        try:
            page = await client.read_events(
                stream,
                cursor,
                max_events=max_events,
                max_bytes=max_bytes,
                wait_seconds=wait_seconds,
            )
        except Exception as exc:
            if _agent_error_fields(exc) is None:
                await self.drop_agent(workspace_id)
            raise translate_error(exc) from None
        if isinstance(page, dict):
            return page
        parsed: dict[str, Any] = json.loads(page.to_json())
        return parsed

    async def merge_tags(self, workspace_id: str, updates: Mapping[str, str]) -> WorkspaceRecord:
        """Adds or replaces managed tags without losing concurrent updates to other keys."""
        lock = self._tag_locks.setdefault(workspace_id, asyncio.Lock())
        async with lock:
            record = await self.driver.get(workspace_id)
            return await self.driver.set_tags(workspace_id, {**record.tags, **updates})

    # --- inputs that need the configuration -----------------------------------------------------

    def secret_env(self, names: list[str]) -> dict[str, str]:
        """The values of allowlisted secrets; a name outside the allowlist is refused (403)."""
        env: dict[str, str] = {}
        for i, name in enumerate(names):
            field = f"secret_names[{i}]"
            try:
                policy.allowed(
                    name, self.settings.allowed_secrets, "MODAL_WORKSPACE_ALLOWED_SECRETS"
                )
            except PolicyError as exc:
                raise from_policy_error(exc, field) from None
            values = self.settings.secret_values.get(name)
            if values is None:
                raise PermissionDeniedError(
                    f"{field}: secret {name!r} is allowlisted but has no values configured "
                    "(MODAL_WORKSPACE_LOCAL_SECRETS_FILE)",
                    field=field,
                )
            env.update(values)
        return env

    def github_token(self) -> str:
        name = self.settings.github_secret
        token = self.secret_env([name]).get("GH_TOKEN") if name else None
        if not token:
            raise PermissionDeniedError(
                f"the GitHub secret {name!r} has no GH_TOKEN value configured",
                field="use_github_token",
            )
        return token

    def volumes(self, volumes: Mapping[str, str]) -> dict[str, str]:
        checked: dict[str, str] = {}
        for mount, name in volumes.items():
            field = f"volumes[{mount[:32]}]"
            try:
                path = policy.workspace_path("/", mount)
                policy.allowed(
                    name, self.settings.allowed_volumes, "MODAL_WORKSPACE_ALLOWED_VOLUMES"
                )
            except PolicyError as exc:
                raise from_policy_error(exc, field) from None
            if path == "/" or path == WORKSPACE_ROOT:
                raise InvalidArgumentError(f"{field}: cannot mount a volume over {path}", field)
            checked[path] = name
        return checked

    # --- background work ------------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self, *, close_driver: bool = True) -> None:
        """Stops background work and closes every agent channel (and the driver, if asked)."""
        if self._closed:
            return
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        for workspace_id in list(self._clients):
            await self.drop_agent(workspace_id)
        if close_driver:
            await self.driver.close()


async def _close_quietly(client: Any) -> None:
    for name in ("aclose", "close"):
        close = getattr(client, name, None)
        if close is not None:
            with contextlib.suppress(Exception):
                result = close()
                if asyncio.iscoroutine(result):
                    await result
            return


def host_path(record: WorkspaceRecord, path: str) -> str:
    """A validated `/workspace/...` path as commands in this workspace see it."""
    return (
        record.root.rstrip("/") + path[len(WORKSPACE_ROOT) :]
        if path != WORKSPACE_ROOT
        else record.root
    )


def client_path(path: str) -> str:
    """A path from the agent (relative to the root) as clients see it: under `/workspace`."""
    if path.startswith(WORKSPACE_ROOT + "/") or path == WORKSPACE_ROOT:
        return path
    path = path.lstrip("/")
    return WORKSPACE_ROOT if path in ("", ".") else f"{WORKSPACE_ROOT}/{path.removeprefix('./')}"
