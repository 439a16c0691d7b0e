"""The local driver's settings: where its data lives, how its workspaces are isolated, the disk
each gets, the host ports they may reach, and what snapshots may hold on the host.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .reading import ConfigError, Environ, read_mib, split_list

__all__ = [
    "DATA_ROOT_ENV",
    "DEFAULT_DISK_MB",
    "DEFAULT_SNAPSHOT_FREE_FLOOR_MB",
    "DISK_MB_ENV",
    "HOST_PORTS_ENV",
    "ISOLATION_ENV",
    "SNAPSHOTS_BUDGET_ENV",
    "SNAPSHOT_BUDGET_ENV",
    "SNAPSHOT_FREE_FLOOR_ENV",
    "IsolationMode",
    "LocalSettings",
    "default_data_root",
    "read_local",
]

DATA_ROOT_ENV = "MODAL_WORKSPACE_DATA_ROOT"
ISOLATION_ENV = "MODAL_WORKSPACE_ISOLATION"
DISK_MB_ENV = "MODAL_WORKSPACE_DISK_MB"
HOST_PORTS_ENV = "MODAL_WORKSPACE_HOST_PORTS"
# What local snapshots may hold on the host: per workspace (default: twice its disk), for the
# whole data root (default: half its file system), and the free space a copy leaves.
SNAPSHOT_BUDGET_ENV = "MODAL_WORKSPACE_SNAPSHOT_BUDGET_MB"
SNAPSHOTS_BUDGET_ENV = "MODAL_WORKSPACE_SNAPSHOTS_BUDGET_MB"
SNAPSHOT_FREE_FLOOR_ENV = "MODAL_WORKSPACE_SNAPSHOT_FREE_FLOOR_MB"
DEFAULT_SNAPSHOT_FREE_FLOOR_MB = 1024
DEFAULT_DISK_MB = 10_240
MIN_DISK_MB, MAX_DISK_MB = 64, 16 << 20
IsolationMode = Literal["auto", "bwrap", "none"]


class LocalSettings(BaseModel):
    """What the local driver is made with (`drivers.create_driver`)."""

    model_config = ConfigDict(frozen=True)

    data_root: Path
    # Bubblewrap where it works (auto), required (bwrap) or never (none); and the size of each
    # workspace's own disk, where the gateway can mount one.
    isolation: IsolationMode = "auto"
    disk_mb: int = DEFAULT_DISK_MB
    # The host loopback ports workspaces may reach (none by default).
    host_ports: tuple[int, ...] = ()
    # Local snapshots' byte budgets in MiB (None: the defaults above) and free-space floor.
    snapshot_budget_mb: int | None = None
    snapshots_budget_mb: int | None = None
    snapshot_free_floor_mb: int = DEFAULT_SNAPSHOT_FREE_FLOOR_MB


def default_data_root(environ: Environ | None = None) -> Path:
    """The user's data directory: `$XDG_DATA_HOME/modal-workspace`, else `~/.local/share/…`."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "modal-workspace"


def read_local(env: Environ, data_root: str | Path | None = None) -> LocalSettings:
    """`data_root`, a command-line flag, wins over the environment."""
    root = data_root or env.get(DATA_ROOT_ENV) or default_data_root(env)
    return LocalSettings(
        data_root=Path(root).expanduser(),
        isolation=_isolation(env.get(ISOLATION_ENV)),
        disk_mb=_disk_mb(env.get(DISK_MB_ENV)),
        host_ports=_host_ports(env.get(HOST_PORTS_ENV)),
        snapshot_budget_mb=read_mib(env, SNAPSHOT_BUDGET_ENV, None),
        snapshots_budget_mb=read_mib(env, SNAPSHOTS_BUDGET_ENV, None),
        snapshot_free_floor_mb=read_mib(
            env, SNAPSHOT_FREE_FLOOR_ENV, DEFAULT_SNAPSHOT_FREE_FLOOR_MB, least=0
        ),
    )


def _isolation(value: str | None) -> IsolationMode:
    mode = (value or "auto").strip()
    if mode not in ("auto", "bwrap", "none"):
        raise ConfigError(f"{ISOLATION_ENV} must be auto, bwrap or none, not {mode[:32]!r}")
    return mode  # type: ignore[return-value]  # checked just above


def _disk_mb(value: str | None) -> int:
    if not value:
        return DEFAULT_DISK_MB
    if not value.strip().isdigit() or not MIN_DISK_MB <= int(value) <= MAX_DISK_MB:
        raise ConfigError(
            f"{DISK_MB_ENV} must be a size in MiB from {MIN_DISK_MB} to {MAX_DISK_MB}, "
            f"not {value.strip()[:16]!r}"
        )
    return int(value)


def _host_ports(text: str | None) -> tuple[int, ...]:
    ports = []
    for part in split_list(text):
        if not part.isdigit() or not 0 < int(part) < 65536:
            raise ConfigError(
                f"{HOST_PORTS_ENV} must list TCP ports (1-65535) separated by commas, "
                f"not {part[:16]!r}"
            )
        ports.append(int(part))
    return tuple(ports)
