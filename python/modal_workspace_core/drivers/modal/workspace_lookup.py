"""How the Modal driver finds a workspace and reads its records: once per operation (the call's
`lookups`, which its changes keep current), the running sandbox by name, else the newest ended
one from the list, else the records alone once Modal lists it no more; the records from the
shared store, a running sandbox's tag copy when it names their newest version; and each change
committed there first, then copied to the sandbox's tags (`workspace_records.py`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

import modal
import modal.exception

from ...config import ModalSettings
from ...errors import ConflictError, NotFoundError
from ...policy import WORKSPACE_ROOT, WORKSPACE_TAGS
from ...runtime.call import CALL
from ..base import Suspension, WorkspaceRecord, failed_start, utc_now
from . import records
from .exits import end_reason
from .lookup import UNLISTED_END, Current, latest_sandbox
from .workspace_records import TAG_VERSION, Change, WorkspaceRecords

__all__ = [
    "JUST_MADE_SECONDS",
    "MANAGED_BY",
    "TAG_CREATED_AT",
    "TAG_MANAGED_BY",
    "TAG_WORKSPACE_ID",
    "TAG_WORKSPACE_ROOT",
    "WorkspaceLookup",
]

log = logging.getLogger(__name__)

MANAGED_BY = "modal-workspace-mcp"
# The tags only the driver writes (their names live in the core's policy): a caller's tags can
# never replace them.
TAG_MANAGED_BY, TAG_WORKSPACE_ID, TAG_WORKSPACE_ROOT, TAG_CREATED_AT = WORKSPACE_TAGS

# How long a workspace this process made counts as just made (`just_made`).
JUST_MADE_SECONDS = 30.0


class WorkspaceLookup:
    """Finding `ModalDriver`'s workspaces and their records. What it uses of the driver is
    declared below; the driver defines it."""

    name: str
    settings: ModalSettings
    _handles: dict[str, modal.Sandbox]
    _made: dict[str, tuple[WorkspaceRecord, float]]
    _records: WorkspaceRecords

    if TYPE_CHECKING:

        async def _app_id(self) -> str: ...

        async def _observe(self, current: Current) -> Current: ...

    async def _current(self, workspace_id: str, *, tags: bool = True) -> Current:
        """The workspace's latest sandbox and records, looked up once per operation (the call's
        `lookups`, which every change of this driver keeps current)."""
        call = CALL.get()
        known = call.lookups.get(workspace_id) if call is not None else None
        if isinstance(known, Current):
            return known
        current = await self._look_up(workspace_id, tags=tags)
        if call is not None and tags:
            call.lookups[workspace_id] = current
        return current

    def _looked_up(self, current: Current | None, workspace_id: str = "") -> None:
        """What this operation holds of the workspace is `current` now (None: look it up
        again)."""
        call = CALL.get()
        if call is None:
            return
        key = current.workspace_id if current is not None else workspace_id
        if current is None:
            call.lookups.pop(key, None)
        else:
            call.lookups[key] = current

    async def _look_up(self, workspace_id: str, *, tags: bool = True) -> Current:
        """The workspace's latest sandbox: the running one by name (one call, and one for its
        tags when asked), else the newest ended one from the list (which carries its tags).
        A workspace never made, or purged, is not found."""
        try:
            sandbox = await modal.Sandbox.from_name.aio(self.settings.app_name, workspace_id)
        except modal.exception.NotFoundError:
            sandbox = None
        if sandbox is not None and sandbox.returncode is None:
            found = await sandbox.get_tags.aio() if tags else {}
            if tags:
                found = await self._fresh(workspace_id, found, copy=True)
            self._handles[workspace_id] = sandbox
            return Current(workspace_id, sandbox, found, None)
        wanted = {TAG_MANAGED_BY: MANAGED_BY, TAG_WORKSPACE_ID: workspace_id}
        info = await latest_sandbox(await self._app_id(), wanted)
        if info is not None and records.TAG_PURGED not in info.tags:
            found = await self._fresh(workspace_id, info.tags, copy=False)
            if records.TAG_PURGED not in found:
                return Current(workspace_id, None, found, info.result, info)
        stored = None if info is not None else await self._records.load(workspace_id)
        if stored is None or records.TAG_PURGED in stored.tags:
            # Never made, purged, or (its sandbox still listed) purged by its records.
            raise NotFoundError(
                "not_found", f"workspace {workspace_id} does not exist", "workspace_id"
            )
        # Modal no longer lists its sandbox (it keeps ended ones for a while it does not
        # promise): the records are the store's, and the sandbox ended.
        return Current(workspace_id, None, stored.tags, UNLISTED_END)

    async def _fresh(
        self, workspace_id: str, tags: Mapping[str, str], *, copy: bool
    ) -> dict[str, str]:
        """The workspace's records: a running sandbox's copy when it names the newest version
        (`copy`: one miss to check), else the store's. A workspace the store has never recorded
        (made before it kept records) is recorded from its tags, once."""
        version = tags.get(TAG_VERSION, "")
        plain = {k: v for k, v in tags.items() if k != TAG_VERSION}
        if (
            copy
            and version.isdigit()
            and await self._records.is_current(workspace_id, int(version))
        ):
            return plain
        stored = await self._records.load(workspace_id)
        if stored is None:
            stored = await self._records.update(workspace_id, lambda same: same, base=plain)
        return stored.tags

    async def _save(self, current: Current, change: Change) -> dict[str, str]:
        """Commits `change` to the workspace's records (every gateway's write kept), then copies
        them to its sandbox's tags, the index the list call reads (a copy that fails costs
        nothing: readers check it against the store)."""
        saved = await self._records.update(current.workspace_id, change, base=current.tags)
        self._looked_up(replace(current, tags=saved.tags))
        # The record its create answered is out of date now.
        self._made.pop(current.workspace_id, None)
        if current.sandbox is not None or current.info is not None:
            try:
                sandbox = await current.handle()
                await sandbox.set_tags.aio({**saved.tags, TAG_VERSION: str(saved.version)})
            except modal.exception.Error as exc:
                log.info("the tags of %s were not copied: %s", current.workspace_id, exc)
        return saved.tags

    async def _running(self, workspace_id: str, *, tags: bool = True) -> Current:
        """The workspace's running sandbox; an ended one is refused as the local driver refuses
        it (terminated: not found; suspended: resume it first)."""
        current = await self._current(workspace_id, tags=tags)
        if current.running:
            return current
        # Ended some other way: what it left (its exit, its stderr) is recorded first, so that
        # the refusal says why.
        current = await self._observe(current)
        if records.TAG_ENDED in current.tags:
            raise NotFoundError(
                "not_found", f"workspace {workspace_id} was terminated", "workspace_id"
            )
        # Why it ended, from its record or else from Modal's result, so the caller can act.
        suspension = records.suspension(current.tags)
        reason: str = "ended"
        if suspension is not None:
            reason = suspension.reason
        elif current.result is not None:
            reason = end_reason(current.result)
        detail = f": {suspension.detail}" if suspension and suspension.detail else ""
        if reason == "failed_to_start":
            raise ConflictError(
                "conflict",
                failed_start(workspace_id, suspension.detail if suspension else ""),
                "workspace_id",
            )
        raise ConflictError(
            "conflict",
            f"workspace {workspace_id} is suspended ({reason}{detail}); resume it first",
            "workspace_id",
        )

    def _record(self, current: Current) -> WorkspaceRecord:
        tags = current.tags
        resources = records.resources(tags)
        suspension = records.suspension(tags)
        if current.running:
            state = "running"
            suspension = None
        elif records.TAG_ENDED in tags:
            state = "terminated"
            suspension = None
        else:
            state = "suspended"
            if suspension is None:
                # Its exit snapshot is still being made: recorded at the next look.
                assert current.result is not None
                suspension = Suspension(reason=end_reason(current.result), at=utc_now())
        return WorkspaceRecord(
            workspace_id=current.workspace_id,
            driver=self.name,
            root=tags.get(TAG_WORKSPACE_ROOT, WORKSPACE_ROOT),
            created_at=tags.get(TAG_CREATED_AT, ""),
            tags=records.caller_tags(tags),
            state=state,  # type: ignore[arg-type]
            resources=resources,
            block_network=bool(resources.get("block_network", False)),
            lineage=records.lineage(tags),
            suspension=suspension,
            started_at=tags.get(records.TAG_STARTED) or tags.get(TAG_CREATED_AT) or None,
            ended_at=tags.get(records.TAG_ENDED),
            lifecycle=records.notes(tags),
        )

    def just_made(self, workspace_id: str) -> WorkspaceRecord | None:
        """The record of a workspace this process made (or resumed) moments ago, with its
        sandbox's handle at hand: what the first channel to it needs, without a lookup (the
        create's answer is that record). Only for opening a channel, which fails on the handle
        if the sandbox has ended since, and then looks it up."""
        made = self._made.get(workspace_id)
        if made is None or workspace_id not in self._handles:
            return None
        record, at = made
        if time.monotonic() - at >= JUST_MADE_SECONDS:
            del self._made[workspace_id]
            return None
        return record
