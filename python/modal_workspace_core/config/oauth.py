"""OAuth (`oauth/`): how long the access tokens the gateway issues to MCP hosts live.

Hosts such as claude.ai often never refresh a token, so an access token lives long by default;
every request looks it up in the store, so revoking one takes effect at once however long it
had left.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from .reading import Environ, read_seconds

__all__ = ["OAUTH_TOKEN_SECONDS_ENV", "OAuthSettings", "read_oauth"]

OAUTH_TOKEN_SECONDS_ENV = "MODAL_WORKSPACE_OAUTH_TOKEN_SECONDS"
DEFAULT_OAUTH_TOKEN_SECONDS = 30 * 24 * 3600
MIN_OAUTH_TOKEN_SECONDS = 60
MAX_OAUTH_TOKEN_SECONDS = 365 * 24 * 3600


class OAuthSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    oauth_token_seconds: int = DEFAULT_OAUTH_TOKEN_SECONDS


def read_oauth(env: Environ) -> OAuthSettings:
    seconds = read_seconds(
        env,
        OAUTH_TOKEN_SECONDS_ENV,
        DEFAULT_OAUTH_TOKEN_SECONDS,
        MIN_OAUTH_TOKEN_SECONDS,
        MAX_OAUTH_TOKEN_SECONDS,
    )
    return OAuthSettings(oauth_token_seconds=seconds)
