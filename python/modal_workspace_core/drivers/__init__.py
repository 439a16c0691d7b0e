"""Drivers: how workspaces are made on a provider. `create_driver` picks one by name.

Each driver is imported only when chosen, so the local driver never loads the Modal SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import InvalidArgumentError
from .base import Driver, WorkspaceRecord, WorkspaceSpec

if TYPE_CHECKING:
    from ..config import Settings

__all__ = ["DRIVER_NAMES", "Driver", "WorkspaceRecord", "WorkspaceSpec", "create_driver"]

DRIVER_NAMES = ("local", "modal")


def create_driver(settings: Settings) -> Driver:
    """The driver `settings.driver` names, configured from its section of the settings."""
    if settings.driver == "local":
        from .local import LocalDriver
        from .local.snapshots import SnapshotBudget

        return LocalDriver(
            data_root=settings.data_root,
            isolation=settings.isolation,
            host_ports=settings.host_ports,
            disk_mb=settings.disk_mb,
            keepalive_seconds=settings.channel_keepalive_seconds,
            snapshot_budget=SnapshotBudget(
                per_workspace_mb=settings.snapshot_budget_mb,
                root_mb=settings.snapshots_budget_mb,
                free_floor_mb=settings.snapshot_free_floor_mb,
            ),
        )
    if settings.driver == "modal":
        from .modal.credentials import require_credentials
        from .modal.driver import ModalDriver

        # Checked when the driver is opened, not at its first Modal call: a gateway that can make
        # no call must not start serving (its /healthz would say ok while every create answered
        # 502 and every sweep logged the same failure), and a Python program learns it at
        # `async with Workspaces()`, before it has made anything. A driver a caller constructs
        # itself (with a client of its own, as the tests do) is not checked.
        require_credentials()
        return ModalDriver(
            settings.modal,
            channel_secret=settings.channel_secret,
            keepalive_seconds=settings.channel_keepalive_seconds,
        )
    raise InvalidArgumentError(
        f"unknown driver {settings.driver[:32]!r}; use one of {', '.join(DRIVER_NAMES)}"
    )
