"""Who may call the gateway, and the keys derived from it: the bearer tokens (a variable, a file
or both) and the channel secret every gateway of a deployment derives the same keys from.

The values are held in memory only: never in a repr, a log line or an error message.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .reading import ConfigError, Environ, split_list

__all__ = ["CHANNEL_SECRET_ENV", "TOKEN_ENV", "TOKEN_FILE_ENV", "AccessSettings", "read_access"]

TOKEN_ENV = "MODAL_WORKSPACE_MCP_TOKEN"
TOKEN_FILE_ENV = "MODAL_WORKSPACE_MCP_TOKEN_FILE"
CHANNEL_SECRET_ENV = "MODAL_WORKSPACE_CHANNEL_SECRET"
MIN_TOKEN_CHARS = 8
MIN_CHANNEL_SECRET_CHARS = 32


class AccessSettings(BaseModel):
    """The bearer tokens and the secrets derived from them."""

    model_config = ConfigDict(frozen=True)

    tokens: tuple[str, ...] = Field(default=(), repr=False)
    # Where the tokens came from, for people: a variable name or a file path, never a value.
    token_source: str | None = None
    # The file the tokens were read from, which a sandbox must never see (`private_files`).
    token_file: Path | None = None
    # Modal driver: what each workspace's channel key is derived from
    # (MODAL_WORKSPACE_CHANNEL_SECRET, else the bearer tokens). Never printed.
    configured_channel_secret: str | None = Field(default=None, repr=False)

    @property
    def channel_secret(self) -> bytes | None:
        """What every gateway of a deployment derives a workspace's channel key from: the
        configured secret, else the bearer tokens (rotating them then changes every key, and a
        running Modal workspace refuses the gateway until it is recreated: set
        MODAL_WORKSPACE_CHANNEL_SECRET to keep keys across rotations). None without either."""
        return self._derived("mwc-channel-secret", "mwc-channel")

    @property
    def idempotency_secret(self) -> bytes:
        """What idempotency keys are mapped to exec ids with: derived from the bearer tokens,
        which every gateway of a deployment shares and no workspace holds (a token rotation
        maps the same key to a new exec)."""
        joined = "\x00".join(sorted(self.tokens))
        return hashlib.sha256(f"mwc-idempotency\x00{joined}".encode()).digest()

    @property
    def link_secret(self) -> bytes | None:
        """What download links are signed with: derived, like `channel_secret`, from the
        configured channel secret, else the bearer tokens, so every gateway of a deployment
        accepts the links another minted (and a rotation ends every link). None without
        either: no links are minted."""
        return self._derived("mwc-link-secret", "mwc-link")

    @property
    def ticket_secret(self) -> bytes | None:
        """What tickets (a page's, later a terminal's or a preview's) are signed with: derived
        like `link_secret`, under a label of its own, so that every gateway of a deployment
        accepts the tickets another minted and no ticket's key is any other use's. None without
        either: no tickets are minted."""
        return self._derived("mwc-ticket-secret", "mwc-ticket")

    def _derived(self, from_secret: str, from_tokens: str) -> bytes | None:
        # One label per use and per source, so that no two uses ever share a key.
        if self.configured_channel_secret:
            return hashlib.sha256(
                f"{from_secret}\x00{self.configured_channel_secret}".encode()
            ).digest()
        if not self.tokens:
            return None
        joined = "\x00".join(sorted(self.tokens))
        return hashlib.sha256(f"{from_tokens}\x00{joined}".encode()).digest()


def read_access(env: Environ) -> AccessSettings:
    tokens = [check_token(t, TOKEN_ENV) for t in split_list(env.get(TOKEN_ENV))]
    source = TOKEN_ENV if tokens else None
    token_file = None
    if path := env.get(TOKEN_FILE_ENV):
        tokens.extend(_tokens_from_file(path))
        source = f"{source} and {path}" if source else path
        token_file = Path(path).expanduser()
    return AccessSettings(
        tokens=tuple(dict.fromkeys(tokens)),
        token_source=source,
        token_file=token_file,
        configured_channel_secret=_channel_secret(env.get(CHANNEL_SECRET_ENV)),
    )


def _tokens_from_file(path: str) -> list[str]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{TOKEN_FILE_ENV}: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        # The decoder's message quotes the file's bytes: a token must never reach a log.
        raise ConfigError(f"{TOKEN_FILE_ENV}: {path} is not UTF-8 text") from None
    tokens = [check_token(t, TOKEN_FILE_ENV) for t in split_list(text.replace("\n", ",")) if t]
    if not tokens:
        raise ConfigError(f"{TOKEN_FILE_ENV}: {path} holds no token")
    return tokens


def check_token(token: str, source: str) -> str:
    if not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
        raise ConfigError(f"{source}: a token must be printable ASCII without spaces")
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"{source}: a token must be at least {MIN_TOKEN_CHARS} characters "
            "(`modal-workspace token` mints a good one)"
        )
    return token


def _channel_secret(value: str | None) -> str | None:
    if not value:
        return None
    if len(value.strip()) < MIN_CHANNEL_SECRET_CHARS:
        raise ConfigError(
            f"{CHANNEL_SECRET_ENV}: at least {MIN_CHANNEL_SECRET_CHARS} characters "
            "(`modal-workspace token` mints a good one)"
        )
    return value.strip()
