"""How a setting is read from the environment: the error a bad one stops the start with, and the
parsers every section shares (lists, flags, seconds, sizes).

A message names the variable and never quotes more than a short prefix of its value, which may
be a secret.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from collections.abc import Mapping
from typing import overload

__all__ = [
    "ConfigError",
    "Environ",
    "http_url",
    "is_loopback",
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


def http_url(value: str, name: str, shape: str) -> str:
    """An http(s) URL with a host name and no credentials, query or fragment, without its
    trailing slash; `shape` (an example) is quoted in the message when it is not one."""
    try:
        url = urllib.parse.urlsplit(value.strip())
        url.port  # noqa: B018  # raises on a malformed port
    except ValueError:
        raise ConfigError(f"{name}: not a URL ({shape})") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ConfigError(f"{name}: an http(s) URL with a host name, {shape}")
    if url.username is not None or url.password is not None or url.query or url.fragment:
        raise ConfigError(f"{name}: no credentials, query or fragment ({shape})")
    if not value.strip().isascii() or any(
        c.isspace() or not c.isprintable() for c in value.strip()
    ):
        raise ConfigError(f"{name}: printable ASCII without spaces ({shape})")
    return urllib.parse.urlunsplit((url.scheme, url.netloc, url.path.rstrip("/"), "", ""))


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


def is_loopback(host: str) -> bool:
    """`localhost`, or an address of the loopback network (IPv4 or IPv6, bracketed or not)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
