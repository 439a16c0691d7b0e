"""What the operator lets workspaces name: secrets (with the variables each holds), volumes and
GPUs; and, on the local driver, the secrets' values, from a file the gateway alone reads.

Deny by default: an empty allowlist allows nothing. The values are held in memory only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..errors import core_refusal
from ..policy import env_name, gpu_allowlist, name_allowlist, secret_allowlist
from .reading import ConfigError, Environ, setting_error

__all__ = [
    "ALLOWED_GPUS_ENV",
    "ALLOWED_SECRETS_ENV",
    "ALLOWED_VOLUMES_ENV",
    "LOCAL_SECRETS_FILE_ENV",
    "AllowlistSettings",
    "read_allowlists",
]

ALLOWED_SECRETS_ENV = "MODAL_WORKSPACE_ALLOWED_SECRETS"
ALLOWED_VOLUMES_ENV = "MODAL_WORKSPACE_ALLOWED_VOLUMES"
# GPU types (`T4,H100:2`: a type alone for any count up to Modal's bound, `:N` for at most N);
# empty, the default: no GPU workspaces, since each one bills a GPU for as long as it runs.
ALLOWED_GPUS_ENV = "MODAL_WORKSPACE_ALLOWED_GPUS"
LOCAL_SECRETS_FILE_ENV = "MODAL_WORKSPACE_LOCAL_SECRETS_FILE"
_SHAPE = '{"secret-name": {"ENV_NAME": "value"}}'


class AllowlistSettings(BaseModel):
    """The secret, volume and GPU allowlists, and the secrets' values where the gateway holds
    them."""

    model_config = ConfigDict(frozen=True)

    allowed_secrets: tuple[str, ...] = ()
    # secret name -> the variables it holds, where the allowlist lists them
    # (`openai:OPENAI_API_KEY`): their values are redacted from every command's output.
    secret_keys: Mapping[str, tuple[str, ...]] = {}
    allowed_volumes: tuple[str, ...] = ()
    # Canonical entries, `H100` or `H100:2` (`policy.gpu_allowlist`).
    allowed_gpus: tuple[str, ...] = ()
    # secret name -> {ENV_NAME: value}; locally from MODAL_WORKSPACE_LOCAL_SECRETS_FILE.
    secret_values: Mapping[str, Mapping[str, str]] = Field(default={}, repr=False)
    # The file those values came from, which a sandbox must never see (`private_files`).
    local_secrets_file: Path | None = None


def read_allowlists(env: Environ) -> AllowlistSettings:
    with core_refusal(ALLOWED_SECRETS_ENV, error=setting_error):
        secrets = secret_allowlist(env.get(ALLOWED_SECRETS_ENV, ""))
    with core_refusal(ALLOWED_VOLUMES_ENV, error=setting_error):
        volumes = name_allowlist(env.get(ALLOWED_VOLUMES_ENV, ""))
    with core_refusal(ALLOWED_GPUS_ENV, error=setting_error):
        gpus = gpu_allowlist(env.get(ALLOWED_GPUS_ENV, ""))
    keys = {name: listed for name, listed in secrets.items() if listed}
    path = env.get(LOCAL_SECRETS_FILE_ENV)
    values = _secret_values(path) if path else {}
    _check_listed_keys(values, keys)
    return AllowlistSettings(
        allowed_secrets=tuple(secrets),
        secret_keys=keys,
        allowed_volumes=tuple(volumes),
        allowed_gpus=tuple(gpus),
        secret_values=values,
        local_secrets_file=Path(path).expanduser() if path else None,
    )


def _secret_values(path: str) -> dict[str, dict[str, str]]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{LOCAL_SECRETS_FILE_ENV}: cannot read {path}: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(f"{LOCAL_SECRETS_FILE_ENV}: {path} is not valid JSON") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{LOCAL_SECRETS_FILE_ENV}: {path} must hold an object like {_SHAPE}")
    secrets: dict[str, dict[str, str]] = {}
    for name, values in data.items():
        if not isinstance(values, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in values.items()
        ):
            raise ConfigError(
                f"{LOCAL_SECRETS_FILE_ENV}: secret {name!r} must map names to strings ({_SHAPE})"
            )
        for key in values:
            about = f"{LOCAL_SECRETS_FILE_ENV}: secret {name!r}"
            with core_refusal(LOCAL_SECRETS_FILE_ENV, about=about, error=setting_error):
                env_name(key)
        secrets[name] = dict(values)
    return secrets


def _check_listed_keys(
    values: Mapping[str, Mapping[str, str]], keys: Mapping[str, tuple[str, ...]]
) -> None:
    # Where the gateway holds a secret's values, the variables the allowlist lists for it must
    # be there, as Modal checks a named secret's (`required_keys`).
    for name, listed in keys.items():
        held = values.get(name)
        missing = [key for key in listed if held is not None and key not in held]
        if missing:
            raise ConfigError(
                f"{LOCAL_SECRETS_FILE_ENV}: secret {name!r} has no {', '.join(missing)}, which "
                f"{ALLOWED_SECRETS_ENV} lists for it"
            )
