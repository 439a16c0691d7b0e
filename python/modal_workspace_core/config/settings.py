"""`Settings`: every section of the configuration side by side, and `load_settings`, which reads
each of them once when the server or client starts.

A section is one module of this package: its variables' names, its fields and the function that
reads them. `Settings` inherits every section's fields (so `settings.disk_mb` is the local
section's) and holds the Modal driver's own section as `settings.modal`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .access import AccessSettings, read_access
from .allowlists import AllowlistSettings, read_allowlists
from .artifacts import ArtifactSettings, read_artifacts
from .client import ClientSettings, read_client
from .functions import FunctionSettings, read_functions
from .gateway import GatewaySettings, read_gateway
from .github import GitHubSettings, read_github
from .lifecycle import LifecycleSettings, read_lifecycle
from .local import LocalSettings, read_local
from .modal import ModalSettings, read_modal
from .oauth import OAuthSettings, read_oauth
from .reading import Environ

__all__ = ["Settings", "load_settings"]


class Settings(
    AccessSettings,
    GatewaySettings,
    LocalSettings,
    AllowlistSettings,
    GitHubSettings,
    LifecycleSettings,
    FunctionSettings,
    ArtifactSettings,
    OAuthSettings,
    ClientSettings,
):
    """Everything the gateway (and the command-line client) reads from its environment."""

    model_config = ConfigDict(frozen=True)

    # The Modal driver's section, read when that driver is chosen.
    modal: ModalSettings | None = None

    @property
    def private_files(self) -> tuple[Path, ...]:
        """Files of the operator's that hold secrets (the token file, the local secrets file,
        the GitHub App's key): the local driver refuses to start when a sandbox would see one."""
        held = (
            self.token_file,
            self.local_secrets_file,
            self.github_app_key_file,
            self.client_token_file,
        )
        return tuple(path for path in held if path is not None)

    def __repr__(self) -> str:
        # Tokens and secret values stay out of every repr, log line and traceback.
        return (
            f"Settings(driver={self.driver!r}, data_root={str(self.data_root)!r}, "
            f"tokens={len(self.tokens)}, secrets={sorted(self.secret_values)})"
        )

    __str__ = __repr__


def load_settings(
    environ: Environ | None = None,
    *,
    driver: str | None = None,
    data_root: str | Path | None = None,
    url: str | None = None,
    token_file: str | Path | None = None,
) -> Settings:
    """Reads every setting once; `driver`, `data_root`, and the client's `url` and
    `token_file` (command-line flags) win over the environment. Raises `ConfigError` naming the
    variable that is wrong."""
    env = os.environ if environ is None else environ
    access = read_access(env)
    gateway = read_gateway(env, driver)
    local = read_local(env, data_root)
    allowlists = read_allowlists(env)
    sections: Iterable[BaseModel] = (
        access,
        gateway,
        local,
        allowlists,
        read_github(env, gateway.driver),
        read_lifecycle(env),
        read_functions(env),
        read_artifacts(env),
        read_oauth(env),
        read_client(env, url, token_file),
    )
    # Each section's fields as it holds them (iterating a model yields its fields, unconverted).
    fields = {name: value for section in sections for name, value in section}
    modal = read_modal(env, allowlists) if gateway.driver == "modal" else None
    return Settings(**fields, modal=modal)
