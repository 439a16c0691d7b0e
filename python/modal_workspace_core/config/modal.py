"""The Modal driver's settings: the app its sandboxes live in, the image they start from, how
its agent is run and reached, and the allowlists as that driver enforces them.

Settings only: how the driver uses them (a request's sandbox options, its secrets) lives with
the driver, and nothing here loads the Modal SDK, so a gateway on another driver never does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .allowlists import AllowlistSettings
from .reading import ConfigError, Environ

__all__ = [
    "CHANNEL_IDLE_ENV",
    "DEFAULT_IDLE_TIMEOUT_ENV",
    "DEFAULT_IMAGE_NAME_ENV",
    "SANDBOX_APP_ENV",
    "STATE_VOLUME_ENV",
    "WARM_POOL_ENV",
    "WHEEL_ENV",
    "ModalSettings",
    "read_modal",
]

SANDBOX_APP_ENV = "MODAL_WORKSPACE_SANDBOX_APP"
# A published image (`modal-workspace image publish`) used instead of building the default.
DEFAULT_IMAGE_NAME_ENV = "MODAL_WORKSPACE_DEFAULT_IMAGE_NAME"
CHANNEL_IDLE_ENV = "MODAL_WORKSPACE_CHANNEL_IDLE_SECONDS"
# The idle timeout a workspace gets when its request names none (0: none), so that a workspace
# nobody uses any more ends (with its exit snapshot) instead of running its whole lifetime.
DEFAULT_IDLE_TIMEOUT_ENV = "MODAL_WORKSPACE_DEFAULT_IDLE_TIMEOUT_SECONDS"
# The bounds of `resources.idle_timeout_seconds`, which the default must also keep.
MIN_IDLE_TIMEOUT_SECONDS, MAX_IDLE_TIMEOUT_SECONDS = 5, 24 * 3600
# The Volume that holds what every gateway container shares (`drivers/modal/volume_store.py`).
STATE_VOLUME_ENV = "MODAL_WORKSPACE_STATE_VOLUME"
# How many sandboxes of the default resources each gateway keeps started for creates to claim
# (`drivers/modal/warm_pool.py`); 0, the default: none.
WARM_POOL_ENV = "MODAL_WORKSPACE_WARM_POOL"
MAX_WARM_POOL = 20
# A wheel of this project (or a directory holding this version's), put into the default image
# instead of one built from the checkout's source: the gateway's image sets it to the wheel it
# installed (`modal_app.py`).
WHEEL_ENV = "MODAL_WORKSPACE_WHEEL"

_VOLUME_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True)
class ModalSettings:
    """The Modal driver's configuration (`Settings.modal`, read when that driver is chosen)."""

    app_name: str = "modal-workspace-sandboxes"
    # The Volume of the shared store (OAuth clients and tokens), made at first use if missing.
    state_volume: str = "modal-workspace-state"
    # The allowlists of `Settings` (read once there), which the driver checks again itself
    # before any call to Modal.
    allowed_secrets: tuple[str, ...] = ()
    # secret name -> the variables the allowlist lists for it (`openai:OPENAI_API_KEY`).
    secret_keys: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    allowed_volumes: tuple[str, ...] = ()
    # GPU types, canonical, each with the most a workspace may ask for where it says
    # (`H100:2`); empty: no GPU workspaces.
    allowed_gpus: tuple[str, ...] = ()
    default_image_name: str | None = None
    # The wheel the default image installs (`WHEEL_ENV`); None: built from the checkout.
    wheel: Path | None = None
    # The idle timeout of a new workspace whose request names none; None: no idle timeout.
    default_idle_timeout_seconds: int | None = 900
    # Seconds without traffic after which the agent channel's exec is closed.
    channel_idle_seconds: float = 60.0
    # How long `connect` keeps trying while a new sandbox's daemon starts listening.
    agent_start_seconds: float = 30.0
    # The agent's command inside the sandbox (its `daemon` and `connect` modes).
    agent_command: tuple[str, ...] = ("mwc-agent",)
    # Outside /workspace, so file listings and `git status` never show them.
    agent_state_dir: str = "/run/mwc/state"
    agent_socket: str = "/run/mwc/agent.sock"
    # How long a filesystem snapshot may take before it is given up (the SDK's default, 55 s,
    # is too short for a large workspace; a snapshot that overruns records nothing).
    snapshot_timeout_seconds: int = 900
    # Sandboxes kept started for creates to claim (`WARM_POOL_ENV`); 0: no pool.
    warm_pool: int = 0


def read_modal(env: Environ, allowlists: AllowlistSettings) -> ModalSettings:
    wheel = env.get(WHEEL_ENV)
    state_volume = _volume_name(env.get(STATE_VOLUME_ENV))
    if state_volume in allowlists.allowed_volumes:
        # Mounted in a workspace, the gateways' state (OAuth tokens) could be forged there.
        raise ConfigError(
            f"{STATE_VOLUME_ENV} ({state_volume}) must not be in MODAL_WORKSPACE_ALLOWED_VOLUMES"
        )
    return ModalSettings(
        app_name=env.get(SANDBOX_APP_ENV) or ModalSettings.app_name,
        state_volume=state_volume,
        allowed_secrets=allowlists.allowed_secrets,
        secret_keys=dict(allowlists.secret_keys),
        allowed_volumes=allowlists.allowed_volumes,
        allowed_gpus=allowlists.allowed_gpus,
        default_image_name=env.get(DEFAULT_IMAGE_NAME_ENV) or None,
        wheel=Path(wheel) if wheel else None,
        channel_idle_seconds=_idle_seconds(env.get(CHANNEL_IDLE_ENV)),
        default_idle_timeout_seconds=_default_idle_timeout(env.get(DEFAULT_IDLE_TIMEOUT_ENV)),
        warm_pool=_warm_pool(env.get(WARM_POOL_ENV)),
    )


def _warm_pool(value: str | None) -> int:
    text = (value or "").strip()
    if not text:
        return ModalSettings.warm_pool
    size = int(text) if text.isdecimal() else -1
    if not 0 <= size <= MAX_WARM_POOL:
        raise ConfigError(
            f"{WARM_POOL_ENV} must be a number of sandboxes from 0 (no pool) to "
            f"{MAX_WARM_POOL}, not {text[:16]!r}"
        )
    return size


def _default_idle_timeout(value: str | None) -> int | None:
    text = (value or "").strip()
    if not text:
        return ModalSettings.default_idle_timeout_seconds
    seconds = int(text) if text.isdecimal() else -1
    if seconds != 0 and not MIN_IDLE_TIMEOUT_SECONDS <= seconds <= MAX_IDLE_TIMEOUT_SECONDS:
        raise ConfigError(
            f"{DEFAULT_IDLE_TIMEOUT_ENV} must be 0 (no idle timeout) or seconds from "
            f"{MIN_IDLE_TIMEOUT_SECONDS} to {MAX_IDLE_TIMEOUT_SECONDS}, not {text[:16]!r}"
        )
    return seconds or None


def _idle_seconds(value: str | None) -> float:
    if not value:
        return ModalSettings.channel_idle_seconds
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{CHANNEL_IDLE_ENV} must be a positive number of seconds")
    return seconds


def _volume_name(value: str | None) -> str:
    if not value:
        return ModalSettings.state_volume
    # Modal's rule for object names, checked here so that a bad one stops the start.
    if not _VOLUME_NAME.fullmatch(value):
        raise ConfigError(
            f"{STATE_VOLUME_ENV} must be a Modal Volume name: letters, digits, '-', '_', '.',"
            " at most 64"
        )
    return value
