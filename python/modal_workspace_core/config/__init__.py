"""The gateway's configuration, one section per module, each setting read and checked once when
the server or client starts (`load_settings`): a bad one stops the start with a message that
names its variable, and nothing is re-read per request. Secret values are held in memory only.

Nothing outside this package reads a `MODAL_WORKSPACE_*` variable: the drivers and the
operations take their settings from the `Settings` they are handed (a test holds this). The
names below are those the rest of the package uses; each section's module has the rest.
"""

from __future__ import annotations

from .access import TOKEN_ENV, TOKEN_FILE_ENV
from .allowlists import ALLOWED_GPUS_ENV, ALLOWED_SECRETS_ENV, ALLOWED_VOLUMES_ENV
from .functions import ALLOWED_FUNCTIONS_ENV
from .gateway import DriverName
from .local import (
    DEFAULT_DISK_MB,
    DEFAULT_SNAPSHOT_FREE_FLOOR_MB,
    ISOLATION_ENV,
    SNAPSHOT_BUDGET_ENV,
    SNAPSHOT_FREE_FLOOR_ENV,
    SNAPSHOTS_BUDGET_ENV,
    IsolationMode,
    default_data_root,
)
from .modal import DEFAULT_IMAGE_NAME_ENV, WHEEL_ENV, ModalSettings
from .reading import ConfigError, setting_error
from .settings import Settings, load_settings

__all__ = [
    "ALLOWED_FUNCTIONS_ENV",
    "ALLOWED_GPUS_ENV",
    "ALLOWED_SECRETS_ENV",
    "ALLOWED_VOLUMES_ENV",
    "DEFAULT_DISK_MB",
    "DEFAULT_IMAGE_NAME_ENV",
    "DEFAULT_SNAPSHOT_FREE_FLOOR_MB",
    "ISOLATION_ENV",
    "SNAPSHOTS_BUDGET_ENV",
    "SNAPSHOT_BUDGET_ENV",
    "SNAPSHOT_FREE_FLOOR_ENV",
    "TOKEN_ENV",
    "TOKEN_FILE_ENV",
    "WHEEL_ENV",
    "ConfigError",
    "DriverName",
    "IsolationMode",
    "ModalSettings",
    "Settings",
    "default_data_root",
    "load_settings",
    "setting_error",
]
