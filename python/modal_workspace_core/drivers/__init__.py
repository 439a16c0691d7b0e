"""Drivers: how workspaces are made on a provider. `create_driver` picks one by name.

Each driver is imported only when chosen, so the local driver never loads the Modal SDK.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InvalidArgumentError
from .base import Driver, WorkspaceRecord, WorkspaceSpec

__all__ = ["DRIVER_NAMES", "Driver", "WorkspaceRecord", "WorkspaceSpec", "create_driver"]

DRIVER_NAMES = ("local", "modal")


def create_driver(
    name: str,
    *,
    data_root: Path,
    host_ports: tuple[int, ...] | None = None,
    channel_secret: bytes | None = None,
) -> Driver:
    """The driver called `name`; `data_root` is where the local driver keeps its workspaces,
    `host_ports` the host loopback ports its workspaces may reach (None: from the
    environment), `channel_secret` what the Modal driver derives channel keys from
    (`Settings.channel_secret`)."""
    if name == "local":
        from .local.driver import LocalDriver

        return LocalDriver(data_root=data_root, host_ports=host_ports)
    if name == "modal":
        from .modal.driver import ModalDriver

        return ModalDriver(channel_secret=channel_secret)
    raise InvalidArgumentError(
        f"unknown driver {name[:32]!r}; use one of {', '.join(DRIVER_NAMES)}"
    )
