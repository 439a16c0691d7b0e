"""What the runtime borrows from the operations, and the services built with it: the runtime
cannot import the operations (they build on it), so `Service` is given its hooks.

Every service that serves operations is made here (`new_service`, `open_service`).
"""

from __future__ import annotations

from ..config import Settings
from ..drivers.base import Driver
from ..git.pending import resume_pending
from ..runtime.service import Hooks, Service
from .lifecycle import resume_suspended

__all__ = ["HOOKS", "new_service", "open_service"]

HOOKS = Hooks(
    # A suspended workspace resumes when an operation needs its agent.
    resume_suspended=resume_suspended,
    # Owed whenever this process first reaches a workspace's agent: the repo bookkeeping a
    # restarted gateway left unfinished.
    on_first_connect=(resume_pending,),
)


def new_service(driver: Driver, settings: Settings) -> Service:
    """A service over `driver`, with the operations' hooks."""
    return Service(driver, settings, HOOKS)


def open_service(settings: Settings) -> Service:
    """The service on the driver the settings choose (`Service.open`), with the operations'
    hooks. Raises `WorkspaceError` when the driver cannot start here."""
    return Service.open(settings, HOOKS)
