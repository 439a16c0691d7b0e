"""One agent channel per workspace: opened on first use (resuming a suspended workspace first),
reused while it stays open, dropped when it is lost; every request on it within a deadline.

What an operation owes a workspace around opening its channel (resuming it, the work owed at
first reach) is lent by the layer above (`service.Hooks`), so this module knows no operation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from .._core import REPEATABLE_AGENT_OPS, Page
from ..channel.client import AgentClient
from ..drivers.base import Driver, WorkspaceRecord, failed_start
from ..errors import AgentError, ConflictError, TimeoutError_, WorkspaceError, translate_error
from .call import ANSWER_BY, CALL, RESUMES
from .records import Records
from .usage import Usage

__all__ = ["REPEATABLE_OPS", "Channels", "FirstReach", "Resume"]

# Under the name these lines had before the runtime split, so that a deployment's log filters
# still catch them.
log = logging.getLogger("modal_workspace_core.service")

T = TypeVar("T")
# Agent requests that may be sent again after a lost channel without doing anything twice: the
# core's table of agent ops says which.
REPEATABLE_OPS = REPEATABLE_AGENT_OPS
# Resumes a suspended workspace; returns the snapshot it resumed from (None: it ran already).
Resume = Callable[[str], Awaitable[str | None]]
# Called the first time this process reaches a workspace's agent (again after a resume).
FirstReach = Callable[[str], None]
# The longest a request asked only because a channel is open (`request_if_open`) may take.
_IF_OPEN_SECONDS = 2.0
# How recently an operation must have used a workspace for `request_if_open` to ask its agent.
# Any request counts as activity of the channel (on Modal an open channel keeps the sandbox
# active), so a caller polling what is asked only if open would otherwise keep the channel
# open for ever: this way it outlives the last real use by this long at most.
_IF_USED_WITHIN_SECONDS = 30.0


class Channels:
    """The open channels of one service, by workspace."""

    def __init__(
        self,
        driver: Driver,
        records: Records,
        usage: Usage,
        *,
        agent_timeout: float,
        resume: Resume | None,
        on_first_reach: FirstReach,
    ) -> None:
        self.driver = driver
        self.records = records
        self.usage = usage
        self.agent_timeout = agent_timeout
        self._resume = resume
        self._on_first_reach = on_first_reach
        self._clients: dict[str, AgentClient] = {}
        # The record each open channel was opened with (`live_record`), dropped with it.
        self._live_records: dict[str, WorkspaceRecord] = {}
        self._connect_locks: dict[str, asyncio.Lock] = {}
        self._reached: set[str] = set()

    async def agent(self, workspace_id: str) -> AgentClient:
        """The open channel to the workspace's agent, opened on first use and then reused."""
        if CALL.get() is not None:
            self.usage.touch(workspace_id)
        lock = self._connect_locks.setdefault(workspace_id, asyncio.Lock())
        async with lock:
            client = self._clients.get(workspace_id)
            if client is not None and not client.closed:
                return client
            # One the driver made moments ago is reached on the create's handle, its record the
            # create's; if it ended since, it is looked up like any other.
            record = self._just_made(workspace_id)
            client = None
            if record is not None:
                try:
                    client = await self.driver.connect(workspace_id)
                except WorkspaceError:
                    record = None
            if client is None:
                record = await self._reachable(workspace_id)
                client = await self.driver.connect(workspace_id)
            assert record is not None
            self._clients[workspace_id] = client
            self._live_records[workspace_id] = record
            if workspace_id not in self._reached:
                self._reached.add(workspace_id)
                self._on_first_reach(workspace_id)
            return client

    async def _reachable(self, workspace_id: str) -> WorkspaceRecord:
        """The workspace's record once it can be connected to: a suspended one resumed first
        (the call's answer says so), one that failed to start refused with why."""
        # A stopped workspace is the driver's to revive (the local driver restarts an agent
        # that died), a suspended one resumes; only a terminated one is gone.
        record = await self.records.record(workspace_id)
        suspension = record.suspension
        if record.state == "suspended" and suspension and suspension.reason == "failed_to_start":
            # Resuming would start the same thing again: say why it did not run instead.
            raise ConflictError(failed_start(workspace_id, suspension.detail), field="workspace_id")
        if record.state == "suspended" and self._resume is not None and RESUMES.get():
            resumed = await self._resume(workspace_id)
            call = CALL.get()
            if resumed is not None:
                log.info("resumed %s from %s for the call that needed it", workspace_id, resumed)
                if call is not None:
                    call.resumed.append(resumed)
            self.records.forget_record(workspace_id)
            record = await self.records.record(workspace_id)
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
        made = self._just_made(workspace_id)
        return made if made is not None else await self.records.record(workspace_id)

    def _just_made(self, workspace_id: str) -> WorkspaceRecord | None:
        """The record of a workspace the driver made moments ago, where it keeps one (its
        create answered it; the channel to it opens on the create's handle)."""
        just_made = getattr(self.driver, "just_made", None)
        made = just_made(workspace_id) if just_made is not None else None
        return made if isinstance(made, WorkspaceRecord) else None

    def forget_reached(self, workspace_id: str) -> None:
        """The workspace's agent is a new one (resumed): what is owed at first reach is owed
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
            timeout = self.agent_timeout
            result, data = await client.request(op, dict(args), payload, timeout=timeout)
            return dict(result or {}), bytes(data or b"")

        return await self._with_channel(workspace_id, once, what=op, retry=op in REPEATABLE_OPS)

    def is_open(self, workspace_id: str) -> bool:
        """Whether this process holds an open channel to the workspace's agent now."""
        client = self._clients.get(workspace_id)
        return client is not None and not client.closed

    async def request_if_open(
        self, workspace_id: str, op: str, args: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """One agent request on the workspace's channel if one is open now and an operation
        used the workspace lately, for what is worth asking only when it costs nothing: no
        channel is opened or kept open, no workspace resumed, no use recorded. None otherwise,
        or when the request fails (the next operation that needs the channel finds out why)."""
        client = self._clients.get(workspace_id)
        if client is None or client.closed:
            return None
        if time.monotonic() - self.usage.last_used(workspace_id) > _IF_USED_WITHIN_SECONDS:
            return None
        try:
            # Briefly: what it asks for is an extra, and a busy agent must not hold up the call.
            timeout = min(self.agent_timeout, _IF_OPEN_SECONDS)
            result, _ = await client.request(op, dict(args), timeout=timeout)
        except (WorkspaceError, OSError):
            return None
        return dict(result or {})

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

    def end_waits(self) -> None:
        """Answers the long-polls waiting on every open channel now, with what they have."""
        for client in self._clients.values():
            client.end_waits()

    async def drop_all(self) -> None:
        """Closes every open channel."""
        for workspace_id in list(self._clients):
            await self.drop_agent(workspace_id)

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
        budget = wait + self.agent_timeout
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
