"""modal-workspace-core: remote workspaces for AI agents.

The compiled core (`_core`) owns every input policy, the event model and the cursor ring; this
package re-exports it and holds the Python glue (service, drivers, REST, MCP, CLI).
"""

import atexit

from ._core import EventRing, Page, PolicyError, __version__, _drain_async_runtime
from .client import Workspace, Workspaces
from .errors import WorkspaceError


def _drain_async_waits() -> None:
    # pyo3-async-runtimes may hand a finished future's result to Python from a runtime thread
    # while the interpreter is finalizing, which aborts the process (PyGILState_Release); letting
    # in-flight waits finish first avoids it. Costs nothing if no `wait_async` was ever awaited.
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
