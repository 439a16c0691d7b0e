"""The runtime every operation shares: the driver, one agent channel per workspace, background
tasks, and the translation of every failure into the gateway's error model.

Handlers (the `operations` modules) call `request`/`read_events` here and never see a driver's type.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, ClassVar, TypeVar

from . import policy
from ._core import FINAL_STATES, REPEATABLE_AGENT_OPS, Page, PolicyError
from .channel.client import AgentClient
from .config import Settings
from .drivers import create_driver
from .drivers.base import (
    Driver,
    ExecSecret,
    WorkspaceRecord,
    WorkspaceSecrets,
    failed_start,
    secret_source,
)
from .drivers.mounts import volume_mount
from .errors import (
    AgentError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    TimeoutError_,
    WorkspaceError,
    from_policy_error,
    translate_error,
    without_host_paths,
)
from .policy import WORKSPACE_ROOT
from .runtime.call import ANSWER_BY, CALL

__all__ = ["Service"]

log = logging.getLogger("modal_workspace_core.service")

T = TypeVar("T")
# Agent requests that may be sent again after a lost channel without doing anything twice: the
# core's table of agent ops says which.
REPEATABLE_OPS = REPEATABLE_AGENT_OPS
# How `exec_ended` follows a stream: one long-poll at a time, a page as large as the agent sends.
_FOLLOW_WAIT = 25.0
_FOLLOW_PAGE_BYTES = 1_048_576


class Service:
    """The state behind the operation table: one per server (or per `Workspaces` client)."""

    # Work owed to a workspace whenever this process first reaches its agent (set by
    # `operations`): e.g. repo bookkeeping a restarted gateway left unfinished.
    on_first_connect: ClassVar[tuple[Callable[[Service, str], Coroutine[Any, Any, None]], ...]] = ()
    # How a suspended workspace comes back when an operation needs its agent (set by
    # `operations`): resumes it from its suspension's snapshot, returns that snapshot's id.
    resume_suspended: ClassVar[Callable[[Service, str], Coroutine[Any, Any, str | None]] | None] = (
        None
    )

    def __init__(self, driver: Driver, settings: Settings) -> None:
        self.driver = driver
        self.settings = settings
        # Each driver resolves secrets its own way; the service only checks the allowlist.
        self.secrets = secret_source(driver, settings)
        self._clients: dict[str, AgentClient] = {}
        # The record each open channel was opened with (`live_record`), dropped with it.
        self._live_records: dict[str, WorkspaceRecord] = {}
        self._connect_locks: dict[str, asyncio.Lock] = {}
        self._tag_locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        # Per workspace, the background work that records a repo operation's tags once its exec
        # ends (`git.pending.settle`): what an operation defaulting to the cloned repository
        # waits for when the clone has just ended.
        self.repo_settling: dict[str, set[asyncio.Task[Any]]] = {}
        # A claimed key, and what its release sets (for `claim_within`).
        self._claimed: dict[str, asyncio.Event] = {}
        self._reached: set[str] = set()
        self._roots: dict[str, str] = {}
        # When an operation last used each workspace (monotonic), for the idle limit; before
        # its first use in this process, since the process started.
        self._last_used: dict[str, float] = {}
        self._started = time.monotonic()
        self._closed = False

    def caller_error(self, exc: BaseException) -> WorkspaceError:
        """Any failure below the service as the error its caller sees: translated, and naming
        none of the driver's hidden host paths (`Driver.hidden_paths`)."""
        return without_host_paths(translate_error(exc), self.driver.hidden_paths)

    @classmethod
    def open(cls, settings: Settings) -> Service:
        """The service on the driver the settings choose, configured from them; the local
        driver also refuses to start where a sandbox would see one of the operator's private
        files. Raises `WorkspaceError` when the driver cannot start here."""
        driver = create_driver(settings)
        refuse_exposed = getattr(driver, "refuse_exposed", None)
        if refuse_exposed is not None:
            refuse_exposed(settings.private_files)
        return cls(driver, settings)

    # --- workspaces and channels ----------------------------------------------------------------

    async def record(self, workspace_id: str) -> WorkspaceRecord:
        """The workspace's record; a terminated workspace is as missing as one never made.
        Read from the driver once per operation (`Call.records`)."""
        call = CALL.get()
        record = call.records.get(workspace_id) if call is not None else None
        if record is None:
            record = await self.driver.get(workspace_id)
        if record.state == "terminated":
            raise NotFoundError(f"workspace {workspace_id} was terminated", field="workspace_id")
        self._remember_root(workspace_id, record.root)
        if call is not None:
            call.records[workspace_id] = record
        return record

    async def live_record(self, workspace_id: str) -> WorkspaceRecord:
        """The record as of when the workspace's open channel was opened, for operations that
        need only what a workspace keeps while it runs (its id, root, resources): a channel
        that is open proves the workspace runs, so they cost no driver call. Invalidated with
        the channel (it closes when the sandbox ends, whoever ended it); without one, `record`."""
        client = self._clients.get(workspace_id)
        known = self._live_records.get(workspace_id)
        if client is not None and not client.closed and known is not None:
            return known
        return await self.record(workspace_id)

    def forget_record(self, workspace_id: str) -> None:
        """What this operation read of the workspace is out of date (it changed it)."""
        call = CALL.get()
        if call is not None:
            call.records.pop(workspace_id, None)

    async def root(self, workspace_id: object) -> str:
        """The root commands of this workspace see (`/workspace` unless it runs unisolated), as
        its paths are shown to clients. Not a check: anything that names no workspace, or one
        that cannot be reached now, is `/workspace`, and the operation says what is wrong."""
        if not isinstance(workspace_id, str) or not getattr(self.driver, "roots_vary", False):
            return WORKSPACE_ROOT
        known = self._roots.get(workspace_id)
        if known is not None:
            return known
        try:
            policy.check_id("ws", workspace_id)
            record = await self.driver.get(workspace_id)
        except Exception:
            return WORKSPACE_ROOT
        self._remember_root(workspace_id, record.root)
        return record.root

    def _remember_root(self, workspace_id: str, root: str) -> None:
        # A workspace's root never changes; the cache only has to stay bounded.
        if len(self._roots) >= 4096:
            self._roots.clear()
        self._roots[workspace_id] = root

    async def agent(self, workspace_id: str) -> AgentClient:
        """The open channel to the workspace's agent, opened on first use and then reused."""
        if CALL.get() is not None:
            self.touch(workspace_id)
        lock = self._connect_locks.setdefault(workspace_id, asyncio.Lock())
        async with lock:
            client = self._clients.get(workspace_id)
            if client is not None and not client.closed:
                return client
            # A stopped workspace is the driver's to revive (the local driver restarts an agent
            # that died), a suspended one resumes; only a terminated one is gone.
            record = await self.record(workspace_id)
            resume = type(self).resume_suspended  # a plain function, not bound to self
            suspension = record.suspension
            if (
                record.state == "suspended"
                and suspension
                and suspension.reason == "failed_to_start"
            ):
                # Resuming would start the same thing again: say why it did not run instead.
                raise ConflictError(
                    failed_start(workspace_id, suspension.detail), field="workspace_id"
                )
            if record.state == "suspended" and resume is not None:
                resumed = await resume(self, workspace_id)
                call = CALL.get()
                if resumed is not None:
                    log.info(
                        "resumed %s from %s for the call that needed it", workspace_id, resumed
                    )
                    if call is not None:
                        call.resumed.append(resumed)
                self.forget_record(workspace_id)
                record = await self.record(workspace_id)
            client = await self.driver.connect(workspace_id)
            self._clients[workspace_id] = client
            self._live_records[workspace_id] = record
            if workspace_id not in self._reached:
                self._reached.add(workspace_id)
                for owed in self.on_first_connect:
                    self.spawn(owed(self, workspace_id))
            return client

    def touch(self, workspace_id: str) -> None:
        """An operation used the workspace now (its idle time starts again)."""
        if len(self._last_used) >= 65536:
            self._last_used.clear()
        self._last_used[workspace_id] = time.monotonic()

    def last_used(self, workspace_id: str) -> float:
        return self._last_used.get(workspace_id, self._started)

    def forget_reached(self, workspace_id: str) -> None:
        """The workspace's agent is a new one (resumed): what is owed at first connect is owed
        again."""
        self._reached.discard(workspace_id)

    async def drop_agent(self, workspace_id: str) -> None:
        self._live_records.pop(workspace_id, None)
        client = self._clients.pop(workspace_id, None)
        if client is not None:
            await _close_quietly(client)

    async def request(
        self, workspace_id: str, op: str, args: Mapping[str, Any], payload: bytes = b""
    ) -> tuple[dict[str, Any], bytes]:
        """One agent request. A lost channel is reopened once for a request that is safe to
        repeat (`exec.start` is: the gateway names the exec)."""

        async def once(client: AgentClient) -> tuple[dict[str, Any], bytes]:
            timeout = self.settings.agent_timeout
            result, data = await client.request(op, dict(args), payload, timeout=timeout)
            return dict(result or {}), bytes(data or b"")

        return await self._with_channel(workspace_id, once, what=op, retry=op in REPEATABLE_OPS)

    async def read_events(
        self,
        workspace_id: str,
        stream: str,
        cursor: int,
        *,
        max_events: int,
        max_bytes: int,
        wait_seconds: float,
    ) -> Page:
        """One page of a stream, as the agent's channel holds it."""

        async def once(client: AgentClient) -> Page:
            return await client.read_events(
                stream,
                cursor,
                max_events=max_events,
                max_bytes=max_bytes,
                wait_seconds=wait_seconds,
            )

        what = f"a read of {stream}'s events"
        return await self._with_channel(
            workspace_id, once, what=what, retry=True, wait=wait_seconds
        )

    async def exec_ended(
        self,
        workspace_id: str,
        exec_id: str,
        *,
        within: float | None = None,
        command: bool = False,
    ) -> dict[str, Any]:
        """The exec's status once it has ended, or once `within` seconds have passed (None:
        however long it takes). Follows its stream from the status's last event to its `exit`,
        woken by the event itself: no polling. `command` adds what it ran."""
        args = {"exec_id": exec_id, "command": command}
        status, _ = await self.request(workspace_id, "exec.status", args)
        cursor = int(status.get("last_seq") or 0)
        deadline = None if within is None else time.monotonic() + within
        while status.get("state") not in FINAL_STATES:
            wait = (
                _FOLLOW_WAIT if deadline is None else min(deadline - time.monotonic(), _FOLLOW_WAIT)
            )
            if wait <= 0:
                break
            page = await self.read_events(
                workspace_id,
                exec_id,
                cursor,
                max_events=10_000,
                max_bytes=_FOLLOW_PAGE_BYTES,
                wait_seconds=wait,
            )
            if page.closed or any(e.get("type") == "exit" for e in page.events):
                status, _ = await self.request(workspace_id, "exec.status", args)
                break
            cursor = page.next_cursor
        return status

    async def _with_channel(
        self,
        workspace_id: str,
        use: Callable[[AgentClient], Awaitable[T]],
        *,
        what: str,
        retry: bool,
        wait: float = 0.0,
    ) -> T:
        """`use` of the workspace's channel (opened if need be), within a deadline: the
        request's own wait and the agent timeout. An agent that does not answer (stopped, or
        wedged) costs its callers that long, never more, and never other workspaces."""
        budget = wait + self.settings.agent_timeout
        answer_by = ANSWER_BY.get()
        if answer_by is not None:
            budget = max(min(budget, answer_by - time.monotonic()), 0.0)
        try:
            async with asyncio.timeout(budget):
                return await self._using_channel(workspace_id, use, retry=retry)
        except TimeoutError:
            revived = await self._revive(workspace_id)
            then = (
                "it was stopped and has been restarted (its running commands were lost): try again"
                if revived
                else "the workspace may be overloaded: try again later"
            )
            raise TimeoutError_(
                f"the agent of workspace {workspace_id} did not answer {what} within "
                f"{budget:g} s; {then}",
                field="workspace_id",
            ) from None

    async def _revive(self, workspace_id: str) -> bool:
        """After a deadline passed: a driver that can tell a stopped agent from a busy one
        restarts the stopped one, and the next request opens a new channel to it."""
        revive = getattr(self.driver, "revive", None)
        if revive is None:
            return False
        try:
            revived = bool(await revive(workspace_id))
        except WorkspaceError:
            return False
        if revived:
            await self.drop_agent(workspace_id)
        return revived

    async def _using_channel(
        self, workspace_id: str, use: Callable[[AgentClient], Awaitable[T]], *, retry: bool
    ) -> T:
        for attempt in (1, 2):
            client = await self.agent(workspace_id)
            try:
                return await use(client)
            except Exception as exc:
                # A refusal of the family is an answer; anything else (an OSError, a broken
                # pipe) or a lost channel means the channel is gone.
                lost = not isinstance(exc, WorkspaceError) or (
                    isinstance(exc, AgentError) and exc.channel_lost
                )
                if lost:
                    # The channel is gone (the agent restarted, the socket broke): the next
                    # use opens a new one.
                    await self.drop_agent(workspace_id)
                if not (lost and retry and attempt == 1):
                    raise _naming(translate_error(exc), workspace_id) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def merge_tags(self, workspace_id: str, updates: Mapping[str, str]) -> WorkspaceRecord:
        """Adds or replaces managed tags without losing concurrent updates to other keys."""
        lock = self._tag_locks.setdefault(workspace_id, asyncio.Lock())
        async with lock:
            record = await self.driver.get(workspace_id)
            changed = await self.driver.set_tags(workspace_id, {**record.tags, **updates})
        call = CALL.get()
        if call is not None:
            call.records[workspace_id] = changed
        return changed

    # --- inputs that need the configuration -----------------------------------------------------

    def workspace_secrets(self, names: list[str]) -> WorkspaceSecrets:
        """Allowlisted secrets for a new workspace, as its driver hands them over; a name
        outside the allowlist is refused (403) before the driver is called."""
        for i, name in enumerate(names):
            field = f"secret_names[{i}]"
            self._check_secret(name, field)
            if name == self.settings.github_secret and not (
                self.settings.allow_github_secret_in_workspaces
            ):
                # Every command (and every repository's code) would hold the token.
                raise PermissionDeniedError(
                    f"{field}: {name!r} is the GitHub secret, which reaches git only through "
                    "use_github_token; a workspace may hold it only if the operator sets "
                    "MODAL_WORKSPACE_ALLOW_GITHUB_SECRET_IN_WORKSPACES=1",
                    field=field,
                )
        return self.secrets.for_workspace(names)

    def github_token(self, as_env: str, field: str = "use_github_token") -> ExecSecret:
        """The GitHub secret's `GH_TOKEN` as variable `as_env` of one exec; `field` names the
        input that asked for it in a refusal."""
        name = self.settings.github_secret
        self._check_secret(name, field)
        return self.secrets.for_exec(name, "GH_TOKEN", as_env)

    def _check_secret(self, name: str, field: str) -> None:
        try:
            policy.allowed(name, self.settings.allowed_secrets, "MODAL_WORKSPACE_ALLOWED_SECRETS")
        except PolicyError as exc:
            raise from_policy_error(exc, field) from None

    def volumes(self, volumes: Mapping[str, str]) -> dict[str, str]:
        checked: dict[str, str] = {}
        for mount, name in volumes.items():
            field = f"volumes[{mount[:32]}]"
            path = volume_mount(mount, field)
            try:
                policy.allowed(
                    name, self.settings.allowed_volumes, "MODAL_WORKSPACE_ALLOWED_VOLUMES"
                )
            except PolicyError as exc:
                raise from_policy_error(exc, field) from None
            checked[path] = name
        return checked

    # --- background work ------------------------------------------------------------------------

    def claim(self, key: str) -> bool:
        """True for the first claim of `key` until it is released: one task per piece of
        background work, however many ways it was started."""
        if key in self._claimed:
            return False
        self._claimed[key] = asyncio.Event()
        return True

    async def claim_within(self, key: str, seconds: float) -> bool:
        """`claim`, waiting up to `seconds` for a holder's release."""
        deadline = time.monotonic() + seconds
        while not self.claim(key):
            released = self._claimed[key]
            try:
                await asyncio.wait_for(released.wait(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                return False
        return True

    def release(self, key: str) -> None:
        released = self._claimed.pop(key, None)
        if released is not None:
            released.set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def end_waits(self) -> None:
        """Answers the long-polls waiting on every open channel now, with what they have (a
        stopping server calls it before it waits for its requests to finish)."""
        for client in self._clients.values():
            client.end_waits()

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


def _naming(err: WorkspaceError, workspace_id: str) -> WorkspaceError:
    """A timeout says which workspace did not answer (the channel's own message cannot)."""
    if isinstance(err, TimeoutError_) and workspace_id not in err.message:
        err.message = f"workspace {workspace_id}: {err.message}"
        err.args = (err.message,)
    return err


async def _close_quietly(client: AgentClient) -> None:
    # Closing a channel that already broke must not turn into the caller's error.
    with contextlib.suppress(Exception):
        await client.close()
