"""What the Modal driver keeps of a workspace beyond its files: a set of entries named like tags,
under names starting `mwc-` that only the driver writes, beside the caller's tags.

Where: the set is committed, version by version, to the deployment's shared store
(`workspace_records.py`: the truth, no write lost, kept whatever Modal lists), and copied to the
tags of the workspace's latest sandbox (the index the list call reads). Only the gateway writes
either, through Modal's API: nothing a command in the sandbox runs can reach them (the workspace
is hostile). A `modal.Dict` would not do: its entries expire after 7 days without use.

Each record is one tag with a small, bounded value (compact JSON): a snapshot is its image id,
kind, times, label, repository HEADs and the workspace's tags then; the suspension, lineage,
resources, start and end times and lifecycle notes have a tag each. A workspace keeps at most
`MAX_SNAPSHOTS` snapshots (a `limit` error beyond), plus `EXIT_RESERVE` places for the exit
snapshots the gateway records on its own, so nothing a sandbox's end leaves is refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ...errors import LimitError
from ...policy import WORKSPACE_TAGS
from ..base import (
    LIFECYCLE_SNAPSHOTS_KEPT,
    MAX_LIFECYCLE_NOTES,
    MAX_SNAPSHOTS,
    LifecycleNote,
    Lineage,
    SnapshotRecord,
    SnapshotSpec,
    Suspension,
)
from ..command_user import RUN_AS_ROOT

__all__ = [
    "EXIT_RESERVE",
    "INTERNAL_PREFIX",
    "MAX_SNAPSHOTS",
    "SNAPSHOT_PREFIX",
    "StoredSecretEnv",
    "StoredSnapshot",
    "caller_tags",
    "exit_snapshot_id",
    "internal_tags",
]

# Every tag the driver keeps for itself starts with this. The core reserves it (one of
# `policy.MANAGED_TAG_PREFIXES`): neither a client nor `stored_tag` lets one through.
INTERNAL_PREFIX = "mwc-"
SNAPSHOT_PREFIX = "mwc-sn-"  # + the snapshot id's 32 hex digits
TAG_RESOURCES = "mwc-resources"
TAG_STARTED = "mwc-started-at"
TAG_ENDED = "mwc-ended-at"  # terminated by the gateway, records kept (resumable)
TAG_PURGED = "mwc-purged"  # terminated by the gateway, nothing kept: reads as never made
TAG_SUSPENSION = "mwc-suspension"
TAG_LINEAGE = "mwc-lineage"
TAG_NOTES = "mwc-notes"
# The Modal Secret that holds the workspace's `secret_env`: its id and variable names, never a
# value (Modal keeps those), so that every sandbox of the workspace attaches the same one.
TAG_SECRET_ENV = "mwc-secret-env"

# Snapshots are bounded as on every driver (`MAX_SNAPSHOTS`); beyond them, places kept for the
# exit snapshots the driver records when it sees a sandbox ended.
EXIT_RESERVE = LIFECYCLE_SNAPSHOTS_KEPT
# The longest value of one record tag, in characters.
MAX_RECORD_CHARS = 1024
# A snapshot record keeps the workspace's tags whole when they fit in this; else only the
# repository tags (the files' own record), and a resume keeps the caller's tags as they are.
_TAGS_CHARS = 640
_DETAIL_CHARS = 400
_NOTES_CHARS = 2048


def _dump(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _load(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def internal_tags(tags: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in tags.items() if k.startswith(INTERNAL_PREFIX)}


def caller_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """The tags a workspace record shows: everything but the driver's own records."""
    return {k: v for k, v in tags.items() if not k.startswith(INTERNAL_PREFIX)}


def exit_snapshot_id(sandbox_id: str) -> str:
    """The id of the exit snapshot of one sandbox: derived from it, so that several gateways
    recording the same sandbox's end record the same snapshot once."""
    return "sn-" + hashlib.sha256(f"exit:{sandbox_id}".encode()).hexdigest()[:32]


def _stamp(at: datetime) -> str:
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class StoredSnapshot:
    """A snapshot record and the Modal image that holds its files."""

    record: SnapshotRecord
    image_id: str

    @classmethod
    def new(
        cls,
        workspace_id: str,
        spec: SnapshotSpec,
        image_id: str,
        tags: Mapping[str, str],
        now: datetime | None = None,
    ) -> StoredSnapshot:
        created = now or datetime.now(UTC)
        expires = spec.expires_at(created)
        record = SnapshotRecord(
            snapshot_id=spec.snapshot_id,
            workspace_id=workspace_id,
            kind=spec.kind,
            label=spec.label,
            created_at=_stamp(created),
            expires_at=expires,
            repos=dict(spec.repos),
            tags=_kept_tags(tags),
        )
        return cls(record, image_id)

    def tag(self) -> tuple[str, str]:
        r = self.record
        value = _dump(
            {
                "i": self.image_id,
                "k": r.kind,
                "c": r.created_at,
                "e": r.expires_at,
                "l": r.label,
                "r": r.repos,
                "t": r.tags,
            }
        )
        if len(value) > MAX_RECORD_CHARS:
            # Only the workspace's tags can make it long: keep the repository ones.
            value = _dump(
                {
                    "i": self.image_id,
                    "k": r.kind,
                    "c": r.created_at,
                    "e": r.expires_at,
                    "l": r.label,
                    "r": r.repos,
                    "t": _repo_tags(r.tags),
                    "p": True,
                }
            )
        if len(value) > MAX_RECORD_CHARS:
            raise LimitError(
                f"the record of snapshot {r.snapshot_id} would be {len(value)} characters "
                f"(at most {MAX_RECORD_CHARS}): its repository paths or label are too long",
                field="snapshot_id",
            )
        return SNAPSHOT_PREFIX + r.snapshot_id[3:], value

    @classmethod
    def parse(
        cls, workspace_id: str, key: str, value: str, tags: Mapping[str, str]
    ) -> StoredSnapshot | None:
        data = _load(value)
        if not isinstance(data, dict) or not isinstance(data.get("i"), str):
            return None
        kept = data.get("t") or {}
        if data.get("p") or not isinstance(kept, dict):
            # Only the repository tags were kept: the caller's are the workspace's now.
            kept = {**_plain_tags(tags), **(kept if isinstance(kept, dict) else {})}
        try:
            record = SnapshotRecord(
                snapshot_id="sn-" + key[len(SNAPSHOT_PREFIX) :],
                workspace_id=workspace_id,
                kind=data.get("k", "manual"),
                label=data.get("l", ""),
                created_at=data.get("c", ""),
                expires_at=data.get("e"),
                repos=data.get("r") or {},
                tags=kept,
            )
        except ValueError:
            return None
        return cls(record, data["i"])


def _plain_tags(tags: Mapping[str, str]) -> dict[str, str]:
    """The tags a snapshot restores: not the driver's records, not the fixed workspace tags."""
    return {k: v for k, v in caller_tags(tags).items() if k not in WORKSPACE_TAGS}


def _repo_tags(tags: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in tags.items() if k.startswith("repo-")}


def _kept_tags(tags: Mapping[str, str]) -> dict[str, str]:
    plain = _plain_tags(tags)
    return plain if len(_dump(plain)) <= _TAGS_CHARS else _repo_tags(plain)


def snapshots(workspace_id: str, tags: Mapping[str, str]) -> list[StoredSnapshot]:
    """Every snapshot recorded in `tags`, oldest first."""
    found = []
    for key, value in tags.items():
        if key.startswith(SNAPSHOT_PREFIX):
            stored = StoredSnapshot.parse(workspace_id, key, value, tags)
            if stored is not None:
                found.append(stored)
    return sorted(found, key=lambda s: (s.record.created_at, s.record.snapshot_id))


def with_snapshot(
    tags: Mapping[str, str], stored: StoredSnapshot, *, automatic: bool = False
) -> dict[str, str]:
    """`tags` with one more snapshot record. A snapshot asked for beyond `MAX_SNAPSHOTS` is a
    `limit` error; one the driver records on its own (`automatic`) may use the reserve, and past
    that replaces the oldest exit snapshot, never one that was asked for."""
    out = dict(tags)
    held = snapshots(stored.record.workspace_id, out)
    if not automatic and len(held) >= MAX_SNAPSHOTS:
        raise LimitError(
            "limit",
            f"workspace {stored.record.workspace_id} has {len(held)} snapshots, the most it may "
            "keep: delete one (workspace_snapshot_delete) first",
            "snapshot_id",
            status=429,
        )
    if automatic and len(held) >= MAX_SNAPSHOTS + EXIT_RESERVE:
        exits = [s for s in held if s.record.kind == "exit"]
        if exits:
            out.pop(SNAPSHOT_PREFIX + exits[0].record.snapshot_id[3:], None)
    key, value = stored.tag()
    out[key] = value
    return out


def without_snapshot(tags: Mapping[str, str], snapshot_id: str) -> dict[str, str]:
    return {k: v for k, v in tags.items() if k != SNAPSHOT_PREFIX + snapshot_id[3:]}


def has_snapshot(tags: Mapping[str, str], snapshot_id: str) -> bool:
    return SNAPSHOT_PREFIX + snapshot_id[3:] in tags


# -- the other records ----------------------------------------------------------------------


def suspension_value(suspension: Suspension) -> str:
    data = suspension.model_dump()
    data["detail"] = data["detail"][-_DETAIL_CHARS:]
    return _dump(data)


def suspension(tags: Mapping[str, str]) -> Suspension | None:
    data = _load(tags.get(TAG_SUSPENSION))
    if not isinstance(data, dict):
        return None
    try:
        return Suspension.model_validate(data)
    except ValueError:
        return None


def lineage_value(lineage: Lineage) -> str:
    return _dump(lineage.model_dump())


def lineage(tags: Mapping[str, str]) -> Lineage | None:
    data = _load(tags.get(TAG_LINEAGE))
    if not isinstance(data, dict):
        return None
    try:
        return Lineage.model_validate(data)
    except ValueError:
        return None


def resources_value(resources: Mapping[str, Any]) -> str:
    value = _dump(dict(resources))
    if len(value) > MAX_RECORD_CHARS:
        raise LimitError(
            f"the workspace's resources take {len(value)} characters to record (at most "
            f"{MAX_RECORD_CHARS}): name fewer volumes, regions or allowlist entries",
            field="resources",
        )
    return value


def resources(tags: Mapping[str, str]) -> dict[str, Any]:
    data = _load(tags.get(TAG_RESOURCES))
    out = data if isinstance(data, dict) else {}
    # A workspace recorded before commands had a user of their own ran them as root, and its
    # files are root's: it goes on so (and gets no token) rather than resume unable to write.
    out.setdefault(RUN_AS_ROOT, True)
    return out


def notes(tags: Mapping[str, str]) -> list[LifecycleNote]:
    data = _load(tags.get(TAG_NOTES))
    out = []
    for item in data if isinstance(data, list) else []:
        try:
            out.append(LifecycleNote.model_validate(item))
        except ValueError:
            continue
    return out


def with_note(tags: Mapping[str, str], note: LifecycleNote) -> dict[str, str]:
    """`tags` with `note` last; the oldest notes go first to keep the count and the size bound."""
    kept = [*notes(tags), note.model_copy(update={"detail": note.detail[:_DETAIL_CHARS]})]
    kept = kept[-MAX_LIFECYCLE_NOTES:]
    while len(kept) > 1 and len(_dump([n.model_dump() for n in kept])) > _NOTES_CHARS:
        kept.pop(0)
    return {**tags, TAG_NOTES: _dump([n.model_dump() for n in kept])}


@dataclass(frozen=True)
class StoredSecretEnv:
    """The workspace's own Modal Secret (its `secret_env`): the id it is attached by and the
    variables the agent redacts. A fork is a new workspace and never gets its parent's."""

    secret_id: str
    keys: tuple[str, ...]

    def value(self) -> str:
        value = _dump({"i": self.secret_id, "k": list(self.keys)})
        if len(value) > MAX_RECORD_CHARS:
            raise LimitError(
                f"the names of the secret_env variables take {len(value)} characters to record "
                f"(at most {MAX_RECORD_CHARS}): pass fewer or shorter ones",
                field="secret_env",
            )
        return value


def secret_env(tags: Mapping[str, str]) -> StoredSecretEnv | None:
    data = _load(tags.get(TAG_SECRET_ENV))
    if not isinstance(data, dict) or not isinstance(data.get("i"), str):
        return None
    keys = data.get("k")
    names = tuple(k for k in keys if isinstance(k, str)) if isinstance(keys, list) else ()
    return StoredSecretEnv(data["i"], names)
