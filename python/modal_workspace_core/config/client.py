"""Where the command-line client (`modal-workspace list`, `exec`, …) finds a gateway: its URL,
and the bearer token it sends there. Without a URL the client runs the operations in process.

The token comes from a variable or a file, never from the command line: a process's argv is
readable by every user of the machine (`/proc/<pid>/cmdline`).
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from .access import check_token
from .reading import ConfigError, Environ, http_url, is_loopback

__all__ = [
    "CLIENT_TOKEN_ENV",
    "CLIENT_TOKEN_FILE_ENV",
    "URL_ENV",
    "ClientSettings",
    "is_loopback",
    "read_client",
]

URL_ENV = "MODAL_WORKSPACE_URL"
CLIENT_TOKEN_ENV = "MODAL_WORKSPACE_TOKEN"
CLIENT_TOKEN_FILE_ENV = "MODAL_WORKSPACE_TOKEN_FILE"
_SHAPE = "like https://gateway.example.com or http://127.0.0.1:8000"


class ClientSettings(BaseModel):
    """The gateway a client calls (None: in process) and the token it sends there."""

    model_config = ConfigDict(frozen=True)

    gateway_url: str | None = None
    # Never in a repr, a log line or a message; None: the client sends the server's own first
    # token (`tokens`), when this environment configures one.
    client_token: str | None = Field(default=None, repr=False)
    # The file the token was read from, which a sandbox must never see (`private_files`).
    client_token_file: Path | None = None


def read_client(
    env: Environ, url: str | None = None, token_file: str | Path | None = None
) -> ClientSettings:
    """`url` and `token_file` (command-line flags) win over the environment. The token: the
    flag's file, else the variable, else the variable's file."""
    url_source = "--url" if url else URL_ENV
    url = url or env.get(URL_ENV) or None
    token = env.get(CLIENT_TOKEN_ENV) or None
    file_source = "--token-file" if token_file else CLIENT_TOKEN_FILE_ENV
    path = token_file or env.get(CLIENT_TOKEN_FILE_ENV) or None
    if token is not None:
        token = check_token(token.strip(), CLIENT_TOKEN_ENV)
    read_from = None
    if path is not None and (token_file or token is None):
        read_from = Path(path).expanduser()
        token = _token_from_file(read_from, file_source)
    return ClientSettings(
        gateway_url=_gateway_url(url, url_source) if url else None,
        client_token=token,
        client_token_file=read_from,
    )


def _gateway_url(value: str, source: str) -> str:
    url = http_url(value, source, _SHAPE)
    host = urllib.parse.urlsplit(url).hostname or ""
    if url.startswith("http:") and not is_loopback(host):
        raise ConfigError(
            f"{source}: plain http only to a loopback address (the token would cross the "
            "network readable by anyone on the way): use https"
        )
    return url


def _token_from_file(path: Path, source: str) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        # The decoder's message quotes the file's bytes: a token must never reach a message.
        raise ConfigError(f"{source}: {path} is not UTF-8 text") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise ConfigError(f"{source}: {path} holds no token")
    return check_token(lines[0], source)
