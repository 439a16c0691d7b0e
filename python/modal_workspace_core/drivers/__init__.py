"""Drivers: how workspaces are made on a provider. `create_driver` picks one by name.

Each driver is imported only when chosen, so the local driver never loads the Modal SDK.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InvalidArgumentError
from .base import Driver, WorkspaceRecord, WorkspaceSpec

__all__ = ["DRIVER_NAMES", "Driver", "WorkspaceRecord", "WorkspaceSpec", "create_driver"]

DRIVER_NAMES = ("local", "modal")


def create_driver(name: str, *, data_root: Path) -> Driver:
    """The driver called `name`; `data_root` is where the local driver keeps its workspaces."""
    if name == "local":
        from .local import LocalDriver

        return LocalDriver(data_root=data_root)
    if name == "modal":
        from .modal import ModalDriver

        return ModalDriver()
    raise InvalidArgumentError(
        f"unknown driver {name[:32]!r}; use one of {', '.join(DRIVER_NAMES)}"
    )
