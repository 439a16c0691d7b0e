"""Which client a command gets: REST against the gateway at a URL (`--url`, or
MODAL_WORKSPACE_URL), with a bearer token from a variable or a file; else the operations in
process, on the driver and data root `modal-workspace serve` would use."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from ...config import ConfigError, Settings, load_settings
from ...config.client import CLIENT_TOKEN_ENV, CLIENT_TOKEN_FILE_ENV
from .contract import Client, Target
from .local_client import LocalClient
from .rest_client import RestClient

__all__ = ["open_client"]


@contextlib.asynccontextmanager
async def open_client(target: Target) -> AsyncIterator[Client]:
    """The client `target` and the environment name: REST with a URL, else in process.
    Raises `ConfigError` naming a setting that is wrong."""
    settings = load_settings(
        data_root=target.data_root, url=target.url, token_file=target.token_file
    )
    if settings.gateway_url is not None:
        token = settings.client_token or _server_token(settings)
        async with RestClient(settings.gateway_url, token) as rest:
            yield rest
    else:
        async with LocalClient(settings) as local:
            yield local


def _server_token(settings: Settings) -> str:
    """The server's own first token, where this environment configures one (the banner of
    `modal-workspace serve` says to export it): a person beside their server needs no second
    variable."""
    if settings.tokens:
        return settings.tokens[0]
    raise ConfigError(
        f"no token for the gateway: set {CLIENT_TOKEN_ENV}, or {CLIENT_TOKEN_FILE_ENV} (or "
        "--token-file) to a file that holds it"
    )
