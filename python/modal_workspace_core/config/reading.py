"""How a setting is read from the environment: the error a bad one stops the start with, and the
parsers every section shares (lists, flags, seconds, sizes).

A message names the variable and never quotes more than a short prefix of its value, which may
be a secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import overload

__all__ = [
    "ConfigError",
    "Environ",
    "read_flag",
    "read_mib",
    "read_seconds",
    "setting_error",
    "split_list",
]

# What a section reads from: the process's environment, or a mapping a test or caller hands in.
Environ = Mapping[str, str]
# The longest a seconds setting may be unless its section says otherwise: a year and a day.
MAX_SECONDS = 366 * 24 * 3600
MAX_MIB = 1 << 30


class ConfigError(ValueError):
    """A setting is wrong; the message names the variable and never quotes a secret."""


def setting_error(message: str, _setting: str | None) -> ConfigError:
    """The core's refusal of a setting (`errors.core_refusal`), as a `ConfigError`."""
    return ConfigError(message)


def split_list(value: str | None) -> tuple[str, ...]:
    """A comma-separated list, entries stripped, empty ones dropped."""
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def read_flag(env: Environ, name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ConfigError(f"{name}: use 1 or 0 (true or false), not {value[:16]!r}")


def read_seconds(env: Environ, name: str, default: int, least: int, most: int = MAX_SECONDS) -> int:
    value = (env.get(name) or "").strip()
    if not value:
        return default
    if not value.isdigit() or not least <= int(value) <= most:
        raise ConfigError(f"{name} must be seconds from {least} to {most}, not {value[:16]!r}")
    return int(value)


@overload
def read_mib(env: Environ, name: str, default: int, least: int = 1) -> int: ...
@overload
def read_mib(env: Environ, name: str, default: None, least: int = 1) -> int | None: ...
def read_mib(env: Environ, name: str, default: int | None, least: int = 1) -> int | None:
    value = (env.get(name) or "").strip()
    if not value:
        return default
    if not value.isdigit() or not least <= int(value) <= MAX_MIB:
        raise ConfigError(
            f"{name} must be a size in MiB from {least} to {MAX_MIB}, not {value[:16]!r}"
        )
    return int(value)
