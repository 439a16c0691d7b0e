"""`Service`: the state behind the operation table, composed of the runtime's parts (records,
channels, background tasks, allowlists) over one driver.

Handlers (the `operations` modules) call its methods and never see a driver's type. What only the
operations know (how a suspended workspace resumes, what is owed when an agent is first reached)
comes in through `Hooks`, given to the constructor: `operations.new_service` builds one with them.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from ..channel.client import AgentClient
from ..config import Settings
from ..drivers import create_driver
from ..drivers.base import Driver, ExecSecret, WorkspaceRecord, WorkspaceSecrets
from ..errors import WorkspaceError, translate_error, without_host_paths
from .allowlists import Allowlists
from .channels import Channels
from .exec_end import exec_ended
from .records import Records
from .tasks import Tasks
from .usage import Usage

__all__ = ["Hooks", "Service"]

# Work owed to a workspace whenever this process first reaches its agent.
FirstConnectWork = Callable[["Service", str], Coroutine[Any, Any, None]]
# Resumes a suspended workspace from its suspension's snapshot; returns that snapshot's id.
ResumeSuspended = Callable[["Service", str], Coroutine[Any, Any, str | None]]


@dataclass(frozen=True)
class Hooks:
    """What the operations lend the runtime, which cannot import them (they build on it)."""

    # How a suspended workspace comes back when an operation needs its agent (None: it does
    # not, and reaching it fails as the driver says).
    resume_suspended: ResumeSuspended | None = None
    # Work owed to a workspace whenever this process first reaches its agent: e.g. repo
    # bookkeeping a restarted gateway left unfinished.
    on_first_connect: tuple[FirstConnectWork, ...] = ()


class Service:
    """The state behind the operation table: one per server (or per `Workspaces` client)."""

    def __init__(self, driver: Driver, settings: Settings, hooks: Hooks) -> None:
        self.driver = driver
        self.settings = settings
        self.hooks = hooks
        self.records = Records(driver)
        # What every gateway process of the deployment shares (the OAuth server's state).
        self.shared_store = driver.shared_store
        self.usage = Usage()
        self.tasks = Tasks()
        self.allowlists = Allowlists(driver, settings)
        resume = hooks.resume_suspended
        self.channels = Channels(
            driver,
            self.records,
            self.usage,
            agent_timeout=settings.agent_timeout,
            resume=None if resume is None else functools.partial(resume, self),
            on_first_reach=self._owe_first_connect,
        )
        # Per workspace, the background work that records a repo operation's tags once its exec
        # ends (`git.pending.settle`): what an operation defaulting to the cloned repository
        # waits for when the clone has just ended.
        self.repo_settling: dict[str, set[asyncio.Task[Any]]] = {}
        # One page of a stream, as the agent's channel holds it: the channels' own method, with
        # no frame of the service's between (every woken long-poll goes through it).
        self.read_events = self.channels.read_events
        self._closed = False

    @classmethod
    def open(cls, settings: Settings, hooks: Hooks) -> Service:
        """The service on the driver the settings choose, configured from them; the local
        driver also refuses to start where a sandbox would see one of the operator's private
        files. Raises `WorkspaceError` when the driver cannot start here."""
        driver = create_driver(settings)
        refuse_exposed = getattr(driver, "refuse_exposed", None)
        if refuse_exposed is not None:
            refuse_exposed(settings.private_files)
        return cls(driver, settings, hooks)

    def caller_error(self, exc: BaseException) -> WorkspaceError:
        """Any failure below the service as the error its caller sees: translated, and naming
        none of the driver's hidden host paths (`Driver.hidden_paths`)."""
        return without_host_paths(translate_error(exc), self.driver.hidden_paths)

    def _owe_first_connect(self, workspace_id: str) -> None:
        for owed in self.hooks.on_first_connect:
            self.tasks.spawn(owed(self, workspace_id))

    # --- records (`records.Records`) --------------------------------------------------------

    async def record(self, workspace_id: str) -> WorkspaceRecord:
        """The workspace's record, read once per operation; a terminated one is a 404."""
        return await self.records.record(workspace_id)

    def forget_record(self, workspace_id: str) -> None:
        """What this operation read of the workspace is out of date (it changed it)."""
        self.records.forget_record(workspace_id)

    async def root(self, workspace_id: object) -> str:
        """The root commands of this workspace see, as its paths are shown to clients."""
        return await self.records.root(workspace_id)

    async def merge_tags(self, workspace_id: str, updates: Mapping[str, str]) -> WorkspaceRecord:
        """Adds or replaces managed tags without losing concurrent updates to other keys."""
        return await self.records.merge_tags(workspace_id, updates)

    # --- agent channels (`channels.Channels`) -----------------------------------------------

    async def agent(self, workspace_id: str) -> AgentClient:
        """The open channel to the workspace's agent, opened on first use and then reused."""
        return await self.channels.agent(workspace_id)

    async def live_record(self, workspace_id: str) -> WorkspaceRecord:
        """The record the workspace's open channel was opened with; without one, `record`."""
        return await self.channels.live_record(workspace_id)

    def forget_reached(self, workspace_id: str) -> None:
        """The workspace's agent is a new one (resumed): the first-connect work is owed again."""
        self.channels.forget_reached(workspace_id)

    async def drop_agent(self, workspace_id: str) -> None:
        await self.channels.drop_agent(workspace_id)

    async def request(
        self, workspace_id: str, op: str, args: Mapping[str, Any], payload: bytes = b""
    ) -> tuple[dict[str, Any], bytes]:
        """One agent request, within the agent timeout and the call's deadline."""
        return await self.channels.request(workspace_id, op, args, payload)

    async def request_if_open(
        self, workspace_id: str, op: str, args: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """One agent request only if the workspace's channel is open already and an operation
        used it lately (no channel is opened or kept open, nothing resumed, no use recorded);
        None otherwise or when it fails."""
        return await self.channels.request_if_open(workspace_id, op, args)

    async def exec_ended(
        self,
        workspace_id: str,
        exec_id: str,
        *,
        within: float | None = None,
        command: bool = False,
    ) -> dict[str, Any]:
        """The exec's status once it has ended, or once `within` seconds have passed
        (`exec_end.exec_ended`)."""
        return await exec_ended(self, workspace_id, exec_id, within=within, command=command)

    def last_used(self, workspace_id: str) -> float:
        """When an operation last used the workspace in this process (monotonic)."""
        return self.usage.last_used(workspace_id)

    def end_waits(self) -> None:
        """Answers the long-polls waiting on every open channel now, with what they have (a
        stopping server calls it before it waits for its requests to finish)."""
        self.channels.end_waits()

    # --- inputs the configuration allows (`allowlists.Allowlists`) ---------------------------

    def workspace_secrets(self, names: list[str]) -> WorkspaceSecrets:
        """Allowlisted secrets for a new workspace, as its driver hands them over."""
        return self.allowlists.workspace_secrets(names)

    def github_token(self, as_env: str, field: str = "use_github_token") -> ExecSecret:
        """The GitHub secret's `GH_TOKEN` as variable `as_env` of one exec."""
        return self.allowlists.github_token(as_env, field)

    def volumes(self, volumes: Mapping[str, str]) -> dict[str, str]:
        """The allowlisted volumes by their checked mount path."""
        return self.allowlists.volumes(volumes)

    def gpu(self, request: str | None) -> None:
        """Refuses a GPU request the allowlist does not cover (where the driver attaches GPUs)."""
        self.allowlists.gpu(request)

    # --- background work (`tasks.Tasks`) ----------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Runs `coro` in the background until it ends or the service closes."""
        return self.tasks.spawn(coro)

    def keep_warm(self) -> None:
        """Starts what the driver keeps ready for creates (the Modal driver's warm pool)
        among the background work; once per service, however many times the app starts."""
        keep_warm = getattr(self.driver, "keep_warm", None)
        if keep_warm is not None and self.claim("keep-warm"):
            self.spawn(keep_warm())

    def claim(self, key: str) -> bool:
        """True for the first claim of `key` until it is released."""
        return self.tasks.claim(key)

    async def claim_within(self, key: str, seconds: float) -> bool:
        """`claim`, waiting up to `seconds` for a holder's release."""
        return await self.tasks.claim_within(key, seconds)

    def release(self, key: str) -> None:
        self.tasks.release(key)

    async def close(self, *, close_driver: bool = True) -> None:
        """Stops background work and closes every agent channel (and the driver, if asked)."""
        if self._closed:
            return
        self._closed = True
        await self.tasks.cancel_all()
        await self.channels.drop_all()
        if close_driver:
            await self.driver.close()
