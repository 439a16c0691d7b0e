"""The warm pool (`MODAL_WORKSPACE_WARM_POOL`, off by default): sandboxes of the default image
started ahead of any request, each with the agent's daemon up and waiting on its stdin for the
launch configuration that makes it one workspace's. A create whose sandbox would be exactly such
a one (default resources, image and network, no env, secrets or volumes) claims one instead of
starting a sandbox: it sends the configuration and the workspace's tags, and the container's
start and the agent's are already behind it. The pool refills in the background.

Why a pooled sandbox is safe to hand over: nothing of a workspace is in it before the claim (no
name, no env, no secret, no key: the channel key arrives with the configuration, as on any
create), and its daemon runs no command before it has that configuration. Each gateway process
keeps a pool of its own, tagged with its pool's id, and claims only from it, so two gateways
never claim one sandbox.

What bounds its cost: an entry is claimed only while younger than `MAX_AGE_SECONDS`, then ended
and replaced; it starts with the workspace's lifetime plus that age, so a claimed one still has
its whole lifetime. A pool whose gateway stopped (scaled down, crashed) is ended by the next
sweep of any gateway (`end_strays`), and by Modal's idle timeout of the default resources before
that; the README states what an entry costs while it waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

import modal
import modal.exception

from .lookup import list_sandboxes
from .sandbox_options import MAX_TIMEOUT_SECONDS, SandboxOptions

__all__ = [
    "MAX_AGE_SECONDS",
    "POOL_OWNER_TAG",
    "POOL_TAG",
    "WAITING",
    "Pooled",
    "WarmPool",
    "end_stray_pools",
    "pooled_options",
]

log = logging.getLogger(__name__)

# The tags of a sandbox waiting in a pool; a claim replaces them with the workspace's.
POOL_TAG = "mwc-pool"
WAITING = "waiting"
POOL_OWNER_TAG = "mwc-pool-owner"
# An entry older than this is not claimed but ended and replaced.
MAX_AGE_SECONDS = 600.0
# An unclaimed entry this old belongs to a gateway that stopped: any sweep ends it.
STRAY_AGE_SECONDS = MAX_AGE_SECONDS + 300.0
# After a failed start, the pool waits this long before it tries again.
RETRY_SECONDS = 30.0


def pooled_options(options: SandboxOptions) -> SandboxOptions:
    """What a pool entry for workspaces of `options` starts with: their lifetime plus the
    longest an entry waits, so a claimed one still has its whole lifetime."""
    lifetime = min(options.timeout + int(MAX_AGE_SECONDS), MAX_TIMEOUT_SECONDS)
    return replace(options, timeout=lifetime)


@dataclass
class Pooled:
    """One sandbox waiting in the pool."""

    sandbox: modal.Sandbox
    options: SandboxOptions  # what a workspace of it has (the lifetime before the pool's age)
    started: float  # time.monotonic() at its start

    def age(self) -> float:
        return time.monotonic() - self.started

    def fits(self, wanted: SandboxOptions, max_age: float) -> bool:
        """Whether this is the sandbox a create of `wanted` would have started, and still young
        enough to give its whole lifetime."""
        return self.options == wanted and self.age() < max_age


# Starts one entry's sandbox (the driver's: its app, image and daemon) with the given tags.
StartEntry = Callable[[SandboxOptions, dict[str, str]], Awaitable[modal.Sandbox]]


class WarmPool:
    """A gateway process's pool of `size` waiting sandboxes of `options` (the default
    resources). `run` keeps it full until cancelled; `claim` hands one out; `close` ends the
    rest."""

    def __init__(
        self,
        size: int,
        options: SandboxOptions,
        start: StartEntry,
        max_age: float = MAX_AGE_SECONDS,
    ) -> None:
        self.size = size
        # Entries are claimed younger than this, and replaced once older (at most
        # `MAX_AGE_SECONDS`: their lifetime's extension).
        self.max_age = min(max_age, MAX_AGE_SECONDS)
        self.options = options
        self.pool_id = "pool-" + secrets.token_hex(8)
        self._start = start
        self._entries: list[Pooled] = []
        self._wanted = asyncio.Event()
        self._closed = False
        # Entries started, claimed, and ended unclaimed (too old, or at close), for tests and logs.
        self.started = self.claimed = self.ended = 0

    @property
    def tags(self) -> dict[str, str]:
        return {POOL_TAG: WAITING, POOL_OWNER_TAG: self.pool_id}

    def waiting(self) -> int:
        return len(self._entries)

    def wake(self) -> None:
        """Asks the refill to look again now (the age of its entries changed)."""
        self._wanted.set()

    def claim(self, wanted: SandboxOptions) -> Pooled | None:
        """The youngest waiting sandbox a create of `wanted` may take (None: start one), taken
        out of the pool, which then refills."""
        fitting = [e for e in self._entries if e.fits(wanted, self.max_age)]
        if not fitting:
            return None
        entry = max(fitting, key=lambda e: e.started)
        self._entries.remove(entry)
        self.claimed += 1
        self._wanted.set()
        return entry

    async def run(self) -> None:
        """Keeps the pool full: replaces entries past their age, starts one at a time until
        `size` wait, then sleeps until a claim or the oldest entry's age calls for work."""
        while not self._closed:
            await self._end_old()
            if len(self._entries) < self.size:
                try:
                    sandbox = await self._start(pooled_options(self.options), self.tags)
                except (modal.exception.Error, OSError) as exc:
                    log.warning("the warm pool could not start a sandbox: %s", exc)
                    await self._sleep(RETRY_SECONDS)
                    continue
                if self._closed:
                    await _terminate(sandbox)
                    return
                self._entries.append(Pooled(sandbox, self.options, time.monotonic()))
                self.started += 1
                continue
            oldest = min(e.started for e in self._entries) if self._entries else time.monotonic()
            await self._sleep(max(0.1, self.max_age - (time.monotonic() - oldest)))

    async def _sleep(self, seconds: float) -> None:
        self._wanted.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wanted.wait(), seconds)

    async def _end_old(self) -> None:
        old = [e for e in self._entries if e.age() >= self.max_age]
        for entry in old:
            self._entries.remove(entry)
            await _terminate(entry.sandbox)
            self.ended += 1

    async def close(self) -> None:
        """Ends every waiting sandbox: no workspace has it, nothing is lost."""
        self._closed = True
        self._wanted.set()
        entries, self._entries = self._entries, []
        for entry in entries:
            await _terminate(entry.sandbox)
            self.ended += 1


async def _terminate(sandbox: modal.Sandbox) -> None:
    with contextlib.suppress(modal.exception.Error, OSError):
        await sandbox.terminate.aio()


async def end_stray_pools(app_id: str, keep: str | None) -> int:
    """Ends the waiting sandboxes of pools whose gateway stopped: unclaimed (still tagged
    waiting) and older than `STRAY_AGE_SECONDS`, of any pool but `keep` (this process's).
    Returns how many it ended."""
    ended = 0
    now = time.time()
    async for info in list_sandboxes(app_id, {POOL_TAG: WAITING}, include_finished=False):
        if info.tags.get(POOL_OWNER_TAG) == keep:
            continue
        if now - info.created_at < STRAY_AGE_SECONDS:
            continue
        with contextlib.suppress(modal.exception.Error, OSError):
            await (await info.handle()).terminate.aio()
            ended += 1
    return ended
