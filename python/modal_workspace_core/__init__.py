"""modal-workspace-core: remote workspaces for AI agents.

The compiled core (`_core`) owns every input policy, the event model and the cursor ring; this
package re-exports it and holds the Python glue (service, drivers, REST, MCP, CLI).
"""

from typing import TYPE_CHECKING, Any

from ._core import Page, PolicyError, __version__

if TYPE_CHECKING:
    from .client import Workspace, Workspaces
    from .errors import WorkspaceError
    from .ring import EventRing

# Imported on first use: the agent (`python -m modal_workspace_core.agent`, in every workspace)
# needs only the compiled core, not the service's FastAPI, pydantic and MCP (~30 MiB and half a
# second of start-up, paid by the daemon and by every `connect`), nor asyncio for `EventRing`.
_LAZY = {
    "EventRing": ".ring",
    "Workspace": ".client",
    "Workspaces": ".client",
    "WorkspaceError": ".errors",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EventRing",
    "Page",
    "PolicyError",
    "Workspace",
    "WorkspaceError",
    "Workspaces",
    "__version__",
]
