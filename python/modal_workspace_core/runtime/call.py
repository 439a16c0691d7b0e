"""The context of the call being served: what an operation learns on its way, when its surface
must answer, and where its progress goes.

A leaf module: any layer (the drivers included) may read it, and it imports nothing of the package
but the drivers' contract, so reading it never closes an import cycle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ..drivers.base import WorkspaceRecord

__all__ = [
    "ANSWER_BY",
    "CALL",
    "FULL_SCOPE",
    "GRANT",
    "LINK_BASE",
    "PREVIEW_ZONE",
    "PROGRESS",
    "READ_SCOPE",
    "RESUMES",
    "Call",
    "Reporter",
]

# Set by a transport that can carry progress (MCP over SSE) for the duration of one call:
# long-running handlers report (bytes of output so far, the latest line) through it.
Reporter = Callable[[float, str], Awaitable[None]]
PROGRESS: ContextVar[Reporter | None] = ContextVar("PROGRESS", default=None)
# The monotonic time by which the current call's surface must answer (GPT Actions gives up at
# 45 s): every agent request of the call ends by then, whatever its own deadline.
ANSWER_BY: ContextVar[float | None] = ContextVar("ANSWER_BY", default=None)
# The base URL the request being served reached the gateway by (the settings' public URL when
# set): what the links an operation mints, and the OAuth server's issuer and resource, start with.
LINK_BASE: ContextVar[str | None] = ContextVar("LINK_BASE", default=None)
# The zone the serving gateway's previews are served under (`config.gateway.preview_zone`),
# None where it has none: set beside LINK_BASE, for the preview links an operation mints.
PREVIEW_ZONE: ContextVar[str | None] = ContextVar("PREVIEW_ZONE", default=None)
# Whether reaching a suspended workspace's agent resumes it (a client's call): background work
# the gateway does for itself (following a run) sets it false, and is refused instead, so that
# it never brings back a workspace nobody asked for.
RESUMES: ContextVar[bool] = ContextVar("RESUMES", default=True)
# The scopes an OAuth token may hold: read only (operations that change nothing), or everything.
READ_SCOPE = "workspace:read"
FULL_SCOPE = "workspace:full"
# The scopes of the OAuth token the request came with; None for a static key (every scope).
GRANT: ContextVar[frozenset[str] | None] = ContextVar("GRANT", default=None)


@dataclass
class Call:
    """What the operation being served learns on its way (shared with the tasks it starts)."""

    # The snapshots it resumed suspended workspaces from: its answer says so (`resumed_from`).
    resumed: list[str] = field(default_factory=list)
    # The records it read, by workspace: one operation reads each workspace's record once (on
    # Modal each read is a lookup and a tag read); what it changes it replaces or forgets.
    records: dict[str, WorkspaceRecord] = field(default_factory=dict)
    # What a driver looked up of each workspace for this operation (the Modal driver's latest
    # sandbox and records), so that its steps look it up once: the driver's own, kept current
    # by the driver as it changes them.
    lookups: dict[str, Any] = field(default_factory=dict)


# The operation being served, if any: a workspace whose agent an operation reaches is in use
# (its idle time starts again); the gateway's own background work does not count.
CALL: ContextVar[Call | None] = ContextVar("CALL", default=None)
