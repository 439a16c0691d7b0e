"""modal-workspace-core: remote workspaces for AI agents.

The compiled core (`_core`) owns every input policy, the event model and the cursor ring; this
package re-exports it and holds the Python glue (service, drivers, REST, MCP, CLI).
"""

from ._core import Page, PolicyError, __version__
from .client import Workspace, Workspaces
from .errors import WorkspaceError
from .ring import EventRing

__all__ = [
    "EventRing",
    "Page",
    "PolicyError",
    "Workspace",
    "WorkspaceError",
    "Workspaces",
    "__version__",
]
