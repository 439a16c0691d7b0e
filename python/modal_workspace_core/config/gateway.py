"""How the gateway serves: the driver it runs on, the hosts and proxies it believes, the URL
clients reach it by, and how long it waits on a workspace's agent.
"""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .._core import CHANNEL_KEEPALIVE_SECONDS
from .reading import ConfigError, Environ, http_url, read_seconds, split_list

__all__ = [
    "AGENT_TIMEOUT_ENV",
    "ALLOWED_HOSTS_ENV",
    "DRIVER_ENV",
    "KEEPALIVE_ENV",
    "PUBLIC_URL_ENV",
    "TRUSTED_PROXIES_ENV",
    "DriverName",
    "GatewaySettings",
    "read_gateway",
]

DRIVER_ENV = "MODAL_WORKSPACE_DRIVER"
ALLOWED_HOSTS_ENV = "MODAL_WORKSPACE_ALLOWED_HOSTS"
TRUSTED_PROXIES_ENV = "MODAL_WORKSPACE_TRUSTED_PROXIES"
PUBLIC_URL_ENV = "MODAL_WORKSPACE_PUBLIC_URL"
AGENT_TIMEOUT_ENV = "MODAL_WORKSPACE_AGENT_TIMEOUT"
# How often a gateway sends a frame on an open agent channel (the agent ends a connection
# silent for three times as long: a killed gateway leaves nothing running after that).
KEEPALIVE_ENV = "MODAL_WORKSPACE_CHANNEL_KEEPALIVE_SECONDS"
# How long the gateway waits for a workspace agent's answer (on top of a long-poll's own wait)
# before it answers 504: long enough for a busy agent, short enough that a stopped one does not
# hold the caller.
DEFAULT_AGENT_TIMEOUT = 30.0
MAX_AGENT_TIMEOUT = 600.0
MAX_KEEPALIVE_SECONDS = 300
DriverName = Literal["local", "modal"]


class GatewaySettings(BaseModel):
    """The gateway's own settings, whichever driver it runs on."""

    model_config = ConfigDict(frozen=True)

    driver: DriverName = "local"
    allowed_hosts: tuple[str, ...] = ()
    # Peers (addresses or networks) whose X-Forwarded-* headers are believed; nobody's else.
    trusted_proxies: tuple[str, ...] = ()
    # The base URL clients reach the gateway by (the Actions schema's `servers`), when known.
    public_url: str | None = None
    agent_timeout: float = DEFAULT_AGENT_TIMEOUT
    channel_keepalive_seconds: int = CHANNEL_KEEPALIVE_SECONDS


def read_gateway(env: Environ, driver: str | None = None) -> GatewaySettings:
    """`driver`, a command-line flag, wins over the environment."""
    chosen = driver or env.get(DRIVER_ENV) or "local"
    if chosen not in ("local", "modal"):
        raise ConfigError(f"{DRIVER_ENV}: unknown driver {chosen[:32]!r}; use 'local' or 'modal'")
    return GatewaySettings(
        driver=chosen,  # type: ignore[arg-type]  # checked just above
        allowed_hosts=split_list(env.get(ALLOWED_HOSTS_ENV)),
        trusted_proxies=_trusted_proxies(env.get(TRUSTED_PROXIES_ENV)),
        public_url=_public_url(env.get(PUBLIC_URL_ENV)),
        agent_timeout=_agent_timeout(env.get(AGENT_TIMEOUT_ENV)),
        channel_keepalive_seconds=read_seconds(
            env, KEEPALIVE_ENV, CHANNEL_KEEPALIVE_SECONDS, 1, most=MAX_KEEPALIVE_SECONDS
        ),
    )


def _agent_timeout(value: str | None) -> float:
    if not value:
        return DEFAULT_AGENT_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 1.0 <= seconds <= MAX_AGENT_TIMEOUT:  # NaN fails this too
        raise ConfigError(
            f"{AGENT_TIMEOUT_ENV}: seconds from 1 to {MAX_AGENT_TIMEOUT:g}, not {value[:32]!r}"
        )
    return seconds


def _trusted_proxies(value: str | None) -> tuple[str, ...]:
    proxies = []
    for part in split_list(value):
        try:
            network = ipaddress.ip_network(part, strict=False)
        except ValueError:
            raise ConfigError(
                f"{TRUSTED_PROXIES_ENV}: {part[:64]!r} is not an IP address or network "
                "(e.g. 10.0.0.5,192.168.0.0/24)"
            ) from None
        proxies.append(str(network.network_address) if network.num_addresses == 1 else str(network))
    return tuple(proxies)


def _public_url(value: str | None) -> str | None:
    return http_url(value, PUBLIC_URL_ENV, "like https://gateway.example.com") if value else None
