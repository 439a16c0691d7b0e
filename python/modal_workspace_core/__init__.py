"""modal-workspace-core: remote workspaces for AI agents.

The compiled core (`_core`) owns every input policy, the event model and the cursor ring; this
package re-exports it and holds the Python glue (service, drivers, REST, MCP, CLI).
"""

import atexit

from ._core import EventRing, Page, PolicyError, __version__, _drain_async_runtime
from .client import Workspace, Workspaces
from .errors import WorkspaceError


def _drain_async_waits() -> None:
    # An append on another thread wakes a `wait_async` by taking the GIL; a thread that takes it
    # while the interpreter finalizes is stopped dead, which aborts a Rust thread. From here on
    # such wake-ups stay out (their loops are gone), and those in flight finish first.
    # Costs nothing when no wake-up is in flight.
    _drain_async_runtime(1.0)


atexit.register(_drain_async_waits)

__all__ = [
    "EventRing",
    "Page",
    "PolicyError",
    "Workspace",
    "WorkspaceError",
    "Workspaces",
    "__version__",
]
