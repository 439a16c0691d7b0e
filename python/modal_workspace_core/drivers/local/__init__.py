"""The embedded local driver: workspaces as directories served by a detached agent daemon,
isolated by bubblewrap where it works here."""

from .driver import LocalDriver

__all__ = ["LocalDriver"]
