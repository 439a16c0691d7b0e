"""modal-workspace-core: remote workspaces for AI agents.

The compiled core (`_core`) owns every input policy, the event model and the cursor ring; this
package re-exports it and holds the Python glue (service, drivers, REST, MCP, CLI).
"""

import typing as _typing  # under a private name: `dir()` lists what the package offers

from ._core import Page, PolicyError, __version__

if _typing.TYPE_CHECKING:
    from .errors import (
        AgentError,
        ConflictError,
        InsufficientScopeError,
        InvalidArgumentError,
        LimitError,
        NotFoundError,
        PermissionDeniedError,
        TimeoutError_,
        UnauthenticatedError,
        UpstreamError,
        WorkspaceError,
    )
    from .ring import EventRing
    from .surfaces.python_client import Workspace, WorkspaceCreation, Workspaces

# Imported on first use: the agent (`python -m modal_workspace_core.agent`, in every workspace)
# needs only the compiled core, not the service's FastAPI, pydantic and MCP (their memory and
# start-up would be paid by the daemon and by every `connect`), nor asyncio for `EventRing`.
_LAZY = {
    "EventRing": ".ring",
    "Workspace": ".surfaces.python_client",
    "WorkspaceCreation": ".surfaces.python_client",
    "Workspaces": ".surfaces.python_client",
    "AgentError": ".errors",
    "ConflictError": ".errors",
    "InsufficientScopeError": ".errors",
    "InvalidArgumentError": ".errors",
    "LimitError": ".errors",
    "NotFoundError": ".errors",
    "PermissionDeniedError": ".errors",
    "TimeoutError_": ".errors",
    "UnauthenticatedError": ".errors",
    "UpstreamError": ".errors",
    "WorkspaceError": ".errors",
}


def __getattr__(name: str) -> _typing.Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    # The lazy names are not in the module's namespace until first used; completion and `dir()`
    # should offer them from the start.
    return sorted({*globals(), *__all__})


__all__ = [
    "AgentError",
    "ConflictError",
    "EventRing",
    "InsufficientScopeError",
    "InvalidArgumentError",
    "LimitError",
    "NotFoundError",
    "Page",
    "PermissionDeniedError",
    "PolicyError",
    "TimeoutError_",
    "UnauthenticatedError",
    "UpstreamError",
    "Workspace",
    "WorkspaceCreation",
    "WorkspaceError",
    "Workspaces",
    "__version__",
]
