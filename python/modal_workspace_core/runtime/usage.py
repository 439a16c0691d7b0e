"""When operations last used each workspace, for the idle limit the lifecycle sweep enforces.

Kept in this process's memory only: another gateway's use is not seen here, and the sweep also
counts a workspace's running and recently ended commands as use (`janitor.py`).
"""

from __future__ import annotations

import time

__all__ = ["Usage"]

# Bounds the table; past it the table starts again (a forgotten workspace counts as used when
# the process started, which only postpones an idle suspend).
_MAX_WORKSPACES = 65536


class Usage:
    """The last use of each workspace in this process (monotonic seconds)."""

    def __init__(self) -> None:
        self._last_used: dict[str, float] = {}
        self._started = time.monotonic()

    def touch(self, workspace_id: str) -> None:
        """An operation used the workspace now (its idle time starts again)."""
        if len(self._last_used) >= _MAX_WORKSPACES:
            self._last_used.clear()
        self._last_used[workspace_id] = time.monotonic()

    def last_used(self, workspace_id: str) -> float:
        """When it was last used; before its first use in this process, when the process
        started."""
        return self._last_used.get(workspace_id, self._started)
