"""What the gateway's git steps are given: where GitHub and its API are, the credentials it
holds for them (the GitHub secret's token, or a GitHub App's key that mints one per operation,
`git/credentials.py`), and who `repo_commit` records when the request names nobody.

The token and the key are held in memory only: never in a repr, a log line or an error message.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..errors import core_refusal
from ..policy import author_email, author_name, github_base
from .reading import ConfigError, Environ, read_flag, setting_error

__all__ = [
    "ALLOW_GITHUB_SECRET_ENV",
    "GITHUB_API_URL_ENV",
    "GITHUB_APP_ID_ENV",
    "GITHUB_APP_INSTALLATION_ENV",
    "GITHUB_APP_KEY_ENV",
    "GITHUB_APP_KEY_FILE_ENV",
    "GITHUB_SECRET_ENV",
    "GITHUB_TOKEN_ENV",
    "GITHUB_URL_ENV",
    "GIT_AUTHOR_EMAIL_ENV",
    "GIT_AUTHOR_NAME_ENV",
    "GitHubSettings",
    "read_github",
]

GITHUB_SECRET_ENV = "MODAL_WORKSPACE_GITHUB_SECRET"
GITHUB_URL_ENV = "MODAL_WORKSPACE_GITHUB_URL"
GITHUB_API_URL_ENV = "MODAL_WORKSPACE_GITHUB_API_URL"
ALLOW_GITHUB_SECRET_ENV = "MODAL_WORKSPACE_ALLOW_GITHUB_SECRET_IN_WORKSPACES"
# What the GitHub secret holds, and so the gateway's variable once the secret is attached to it.
GITHUB_TOKEN_ENV = "GH_TOKEN"
# A GitHub App the gateway mints per-operation installation tokens with: its id, its private key
# (PEM, or a file holding it) and, optionally, one installation to use (else the App's
# installation on each repository's owner is looked up).
GITHUB_APP_ID_ENV = "MODAL_WORKSPACE_GITHUB_APP_ID"
GITHUB_APP_KEY_ENV = "MODAL_WORKSPACE_GITHUB_APP_PRIVATE_KEY"
GITHUB_APP_KEY_FILE_ENV = "MODAL_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE"
GITHUB_APP_INSTALLATION_ENV = "MODAL_WORKSPACE_GITHUB_APP_INSTALLATION_ID"
GIT_AUTHOR_NAME_ENV = "MODAL_WORKSPACE_GIT_AUTHOR_NAME"
GIT_AUTHOR_EMAIL_ENV = "MODAL_WORKSPACE_GIT_AUTHOR_EMAIL"
DEFAULT_GITHUB_SECRET = "github"
DEFAULT_GITHUB_URL = "https://github.com"
DEFAULT_GITHUB_API_URL = "https://api.github.com"
DEFAULT_GIT_AUTHOR_NAME = "Workspace agent"
DEFAULT_GIT_AUTHOR_EMAIL = "agent@workspace.invalid"


class GitHubSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    github_secret: str = DEFAULT_GITHUB_SECRET
    # Where git reaches GitHub (`OWNER/REPO` inputs are rebuilt onto it) and where its REST API
    # is; canonical (`github_base`): a GitHub Enterprise server, or a test server.
    github_url: str = DEFAULT_GITHUB_URL
    github_api_url: str = DEFAULT_GITHUB_API_URL
    # Whether `secret_names` may name the GitHub secret (every command would then hold it).
    allow_github_secret_in_workspaces: bool = False
    # Modal driver: the GitHub token as the gateway holds it (`GH_TOKEN` of the GitHub secret,
    # which `modal_app.py` attaches to the gateway, not to sandboxes). Never printed.
    github_token: str | None = Field(default=None, repr=False)
    # The GitHub App, when configured: its id, private key (never printed) and installation;
    # and the file the key was read from, which a sandbox must never see (`private_files`).
    github_app_id: str | None = None
    github_app_private_key: str | None = Field(default=None, repr=False)
    github_app_installation_id: int | None = None
    github_app_key_file: Path | None = None
    git_author_name: str = DEFAULT_GIT_AUTHOR_NAME
    git_author_email: str = DEFAULT_GIT_AUTHOR_EMAIL


def read_github(env: Environ, driver: str) -> GitHubSettings:
    """`driver` is the one chosen: only the Modal gateway holds the GitHub secret's token."""
    key_file = env.get(GITHUB_APP_KEY_FILE_ENV)
    app = _github_app(env, key_file)
    return GitHubSettings(
        github_secret=env.get(GITHUB_SECRET_ENV) or DEFAULT_GITHUB_SECRET,
        github_url=_base_url(env, GITHUB_URL_ENV, DEFAULT_GITHUB_URL),
        github_api_url=_base_url(env, GITHUB_API_URL_ENV, DEFAULT_GITHUB_API_URL),
        allow_github_secret_in_workspaces=read_flag(env, ALLOW_GITHUB_SECRET_ENV),
        github_token=(env.get(GITHUB_TOKEN_ENV) or None) if driver == "modal" else None,
        github_app_id=app[0],
        github_app_private_key=app[1],
        github_app_installation_id=app[2],
        github_app_key_file=Path(key_file).expanduser() if key_file else None,
        git_author_name=_author(env, GIT_AUTHOR_NAME_ENV, author_name, DEFAULT_GIT_AUTHOR_NAME),
        git_author_email=_author(env, GIT_AUTHOR_EMAIL_ENV, author_email, DEFAULT_GIT_AUTHOR_EMAIL),
    )


def _base_url(env: Environ, name: str, default: str) -> str:
    with core_refusal(name, error=setting_error):
        return github_base(env.get(name) or default)


def _github_app(env: Environ, key_file: str | None) -> tuple[str | None, str | None, int | None]:
    """The App's id, private key and installation, all None when no App is configured."""
    app_id = (env.get(GITHUB_APP_ID_ENV) or "").strip()
    key = env.get(GITHUB_APP_KEY_ENV) or ""
    if not key and key_file:
        try:
            key = Path(key_file).expanduser().read_text()
        except OSError as exc:
            raise ConfigError(
                f"{GITHUB_APP_KEY_FILE_ENV}: cannot read it ({exc.strerror})"
            ) from None
    installation = (env.get(GITHUB_APP_INSTALLATION_ENV) or "").strip()
    if not app_id:
        if key or installation:
            raise ConfigError(
                f"{GITHUB_APP_KEY_ENV} or {GITHUB_APP_INSTALLATION_ENV} is set without "
                f"{GITHUB_APP_ID_ENV}: set the App's id too, or unset them"
            )
        return None, None, None
    if not app_id.isdigit() or len(app_id) > 20:
        raise ConfigError(f"{GITHUB_APP_ID_ENV}: a GitHub App id is a number")
    if "PRIVATE KEY-----" not in key:
        raise ConfigError(
            f"{GITHUB_APP_ID_ENV} is set, so {GITHUB_APP_KEY_ENV} (or {GITHUB_APP_KEY_FILE_ENV}) "
            "must hold the App's private key in PEM form"
        )
    if installation and (not installation.isdigit() or len(installation) > 20):
        raise ConfigError(f"{GITHUB_APP_INSTALLATION_ENV}: an installation id is a number")
    return app_id, key, int(installation) if installation else None


def _author(env: Environ, name: str, check: Callable[[str], str], default: str) -> str:
    value = env.get(name)
    if not value:
        return default
    with core_refusal(name, error=setting_error):
        return check(value)
