"""The lifecycle sweep (`janitor.py`): how often it runs (0: never), how long before a lifetime
ends it takes a safety snapshot, and how long suspended and terminated workspaces are kept.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from .reading import Environ, read_seconds

__all__ = [
    "JANITOR_SECONDS_ENV",
    "RETENTION_ENV",
    "SAFETY_MARGIN_ENV",
    "LifecycleSettings",
    "read_lifecycle",
]

JANITOR_SECONDS_ENV = "MODAL_WORKSPACE_JANITOR_SECONDS"
SAFETY_MARGIN_ENV = "MODAL_WORKSPACE_SAFETY_MARGIN_SECONDS"
RETENTION_ENV = "MODAL_WORKSPACE_RETENTION_SECONDS"
DEFAULT_JANITOR_SECONDS = 30
DEFAULT_SAFETY_MARGIN_SECONDS = 300
DEFAULT_RETENTION_SECONDS = 30 * 24 * 3600


class LifecycleSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    janitor_seconds: int = DEFAULT_JANITOR_SECONDS
    safety_margin_seconds: int = DEFAULT_SAFETY_MARGIN_SECONDS
    retention_seconds: int = DEFAULT_RETENTION_SECONDS


def read_lifecycle(env: Environ) -> LifecycleSettings:
    return LifecycleSettings(
        janitor_seconds=read_seconds(env, JANITOR_SECONDS_ENV, DEFAULT_JANITOR_SECONDS, 0),
        safety_margin_seconds=read_seconds(
            env, SAFETY_MARGIN_ENV, DEFAULT_SAFETY_MARGIN_SECONDS, 0
        ),
        retention_seconds=read_seconds(env, RETENTION_ENV, DEFAULT_RETENTION_SECONDS, 1),
    )
