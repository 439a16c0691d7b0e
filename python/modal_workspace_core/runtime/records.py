"""Workspace records as one operation reads them: once per call from the driver, the roots that
paths are shown under, and tag updates that lose no concurrent change.

The driver keeps the record; what is held here is a cache for the call (`Call.records`) or a
value that never changes (a workspace's root).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from .. import policy
from ..drivers.base import Driver, WorkspaceRecord
from ..errors import NotFoundError
from ..policy import WORKSPACE_ROOT
from .call import CALL

__all__ = ["Records"]

# Bounds the cache of roots; past it the cache starts again (a root is cheap to read again).
_MAX_ROOTS = 4096


class Records:
    """The records of one service's workspaces, read through its driver."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self._roots: dict[str, str] = {}
        self._tag_locks: dict[str, asyncio.Lock] = {}

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

    def forget_record(self, workspace_id: str) -> None:
        """What this operation read of the workspace is out of date (it changed it)."""
        call = CALL.get()
        if call is not None:
            call.records.pop(workspace_id, None)
            # And what the driver looked up for it: the next read asks the driver afresh.
            call.lookups.pop(workspace_id, None)

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
        if len(self._roots) >= _MAX_ROOTS:
            self._roots.clear()
        self._roots[workspace_id] = root

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
