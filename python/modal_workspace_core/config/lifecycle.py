"""The lifecycle sweep (`janitor.py`): how often it runs (0: never), how long before a lifetime
ends it takes a safety snapshot, how long suspended and terminated workspaces are kept, and how
often it asks a template's repository whether its branch moved (0: never).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from .reading import ConfigError, Environ, read_seconds

__all__ = [
    "JANITOR_SECONDS_ENV",
    "RETENTION_ENV",
    "SAFETY_MARGIN_ENV",
    "TEMPLATE_CHECK_ENV",
    "LifecycleSettings",
    "read_lifecycle",
]

JANITOR_SECONDS_ENV = "MODAL_WORKSPACE_JANITOR_SECONDS"
SAFETY_MARGIN_ENV = "MODAL_WORKSPACE_SAFETY_MARGIN_SECONDS"
RETENTION_ENV = "MODAL_WORKSPACE_RETENTION_SECONDS"
TEMPLATE_CHECK_ENV = "MODAL_WORKSPACE_TEMPLATE_CHECK_SECONDS"
DEFAULT_JANITOR_SECONDS = 30
DEFAULT_SAFETY_MARGIN_SECONDS = 300
DEFAULT_RETENTION_SECONDS = 30 * 24 * 3600
# A check costs a short-lived workspace per sweep that has templates due (one for all of them)
# and one request to each template's remote: hourly by default, every minute at most.
DEFAULT_TEMPLATE_CHECK_SECONDS = 3600
MIN_TEMPLATE_CHECK_SECONDS = 60


class LifecycleSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    janitor_seconds: int = DEFAULT_JANITOR_SECONDS
    safety_margin_seconds: int = DEFAULT_SAFETY_MARGIN_SECONDS
    retention_seconds: int = DEFAULT_RETENTION_SECONDS
    template_check_seconds: int = DEFAULT_TEMPLATE_CHECK_SECONDS


def read_lifecycle(env: Environ) -> LifecycleSettings:
    return LifecycleSettings(
        janitor_seconds=read_seconds(env, JANITOR_SECONDS_ENV, DEFAULT_JANITOR_SECONDS, 0),
        safety_margin_seconds=read_seconds(
            env, SAFETY_MARGIN_ENV, DEFAULT_SAFETY_MARGIN_SECONDS, 0
        ),
        retention_seconds=read_seconds(env, RETENTION_ENV, DEFAULT_RETENTION_SECONDS, 1),
        template_check_seconds=_template_check(env),
    )


def _template_check(env: Environ) -> int:
    seconds = read_seconds(env, TEMPLATE_CHECK_ENV, DEFAULT_TEMPLATE_CHECK_SECONDS, 0)
    if 0 < seconds < MIN_TEMPLATE_CHECK_SECONDS:
        raise ConfigError(
            f"{TEMPLATE_CHECK_ENV} must be 0 (no checks) or at least "
            f"{MIN_TEMPLATE_CHECK_SECONDS} seconds, not {seconds}"
        )
    return seconds
