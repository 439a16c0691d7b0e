"""Where a Modal workspace's records are kept for good: the deployment's shared store (on Modal, a
Volume: `volume_store.py`), never only on a sandbox.

The records are the tags the driver keeps (`records.py`: snapshots, resources, suspension,
lineage, notes, the caller's tags), as one set per workspace. Sandbox tags were their only home
before: a tag write replaces the whole set (two gateways writing at once lost one), and an ended
sandbox's tags last only while Modal lists it, which Modal does not promise. Now each change is a
new version of the set, committed by the one atomic step the store has (`create`: of two
gateways writing version n+1, one wins and the other applies its change again to what won), so
no write is lost; and the sandbox's tags are a copy, the index the list call reads, kept in step
after each write and rebuilt from here.

Layout, under `workspaces/<id>/`: `v/<n>` is version n (the commit; the newest 64 are kept) and
`record` a copy of the newest, so a read costs one file and one miss (`v/<n+1>` absent), and a
sandbox's copy names its version (`TAG_VERSION`), so a running workspace's tags are checked with
the miss alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ...errors import UpstreamError
from ...shared_store import SharedStore

__all__ = ["FOLDER", "TAG_VERSION", "Versioned", "WorkspaceRecords"]

FOLDER = "workspaces"
# The sandbox tag naming the version its tags copy.
TAG_VERSION = "mwc-version"
# Versions kept behind the newest: a copy more versions behind than this reads the record.
_KEPT_VERSIONS = 64
# How often a change is applied again when other gateways keep committing first.
_ATTEMPTS = 50

Change = Callable[[dict[str, str]], dict[str, str]]


@dataclass(frozen=True)
class Versioned:
    version: int
    tags: dict[str, str]


def _encode(version: int, tags: Mapping[str, str]) -> bytes:
    return json.dumps({"version": version, "tags": dict(tags)}, separators=(",", ":")).encode()


def _decode(raw: bytes | None) -> Versioned | None:
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        tags = {str(k): str(v) for k, v in dict(data["tags"]).items()}
        return Versioned(int(data["version"]), tags)
    except (ValueError, KeyError, TypeError):
        return None


class WorkspaceRecords:
    """The records of every workspace of a deployment, in its shared store."""

    def __init__(self, shared: SharedStore) -> None:
        self.shared = shared

    def _version_key(self, workspace_id: str, version: int) -> str:
        return f"{FOLDER}/{workspace_id}/v/{version:010d}"

    async def load(self, workspace_id: str, known: int = 0) -> Versioned | None:
        """The newest version, or None for a workspace the store has never recorded. `known`:
        a version the caller holds, read no further back than."""
        held = _decode(await self.shared.read(f"{FOLDER}/{workspace_id}/record"))
        if held is None or held.version < known:
            # The copy is missing (its first writer stopped before writing it) or behind.
            first = max(known, 1)
            held = _decode(await self.shared.read(self._version_key(workspace_id, first)))
        # The copy may lag behind a commit whose writer stopped before copying it: walk on.
        while held is not None:
            newer = _decode(
                await self.shared.read(self._version_key(workspace_id, held.version + 1))
            )
            if newer is None:
                return held
            held = newer
        return None

    async def is_current(self, workspace_id: str, version: int) -> bool:
        """Whether `version` is the newest (a copy of it, such as a sandbox's tags, is true)."""
        if version <= 0:
            return False
        following = self._version_key(workspace_id, version + 1)
        return await self.shared.read(following) is None

    async def update(
        self,
        workspace_id: str,
        change: Change,
        *,
        base: Mapping[str, str] | None = None,
        new: bool = False,
    ) -> Versioned:
        """Commits `change` applied to the newest version (to `base`, the records as the
        sandbox's tags hold them, for a workspace the store has never recorded: its first
        version). `new`: a workspace being made, which has none to read (were one there, the
        commit would find it). Raises what `change` raises; nothing is committed then."""
        held = None if new else await self.load(workspace_id)
        for _ in range(_ATTEMPTS):
            current = held.tags if held is not None else dict(base or {})
            version = (held.version if held is not None else 0) + 1
            tags = change(dict(current))
            tags.pop(TAG_VERSION, None)
            if held is not None and tags == current:
                return held
            encoded = _encode(version, tags)
            if await self.shared.create(self._version_key(workspace_id, version), encoded):
                await self.shared.write(f"{FOLDER}/{workspace_id}/record", encoded)
                if version > _KEPT_VERSIONS:
                    stale = self._version_key(workspace_id, version - _KEPT_VERSIONS)
                    await self.shared.remove(stale)
                return Versioned(version, tags)
            # Another gateway committed this version first: apply the change to what it wrote.
            held = await self.load(workspace_id, known=version)
        raise UpstreamError(
            "upstream",
            f"the records of workspace {workspace_id} kept changing under this write; try again",
            "workspace_id",
        )

    async def forget(self, workspace_id: str) -> None:
        """Removes every record of the workspace (it was purged: it reads as never made)."""
        await self.shared.remove(f"{FOLDER}/{workspace_id}")

    async def workspace_ids(self) -> list[str]:
        """Every workspace the store holds records of."""
        return [name for name in await self.shared.names(FOLDER) if name.startswith("ws-")]
