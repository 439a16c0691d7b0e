"""Settings from the environment, read and validated once when the server or client starts.

A bad setting stops the start with a message that names the variable; nothing here is re-read
per request. Secret values loaded here are held in memory only and never printed.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from ._core import CHANNEL_KEEPALIVE_SECONDS
from .errors import WorkspaceError, core_refusal
from .policy import (
    author_email,
    author_name,
    env_name,
    function_allowlist,
    github_base,
    name_allowlist,
    secret_allowlist,
)

if TYPE_CHECKING:
    from .drivers.modal.config import ModalSettings

__all__ = ["ConfigError", "Settings", "default_data_root", "load_settings"]

TOKEN_ENV = "MODAL_WORKSPACE_MCP_TOKEN"
TOKEN_FILE_ENV = "MODAL_WORKSPACE_MCP_TOKEN_FILE"
DRIVER_ENV = "MODAL_WORKSPACE_DRIVER"
DATA_ROOT_ENV = "MODAL_WORKSPACE_DATA_ROOT"
ALLOWED_SECRETS_ENV = "MODAL_WORKSPACE_ALLOWED_SECRETS"
ALLOWED_VOLUMES_ENV = "MODAL_WORKSPACE_ALLOWED_VOLUMES"
GITHUB_SECRET_ENV = "MODAL_WORKSPACE_GITHUB_SECRET"
LOCAL_SECRETS_FILE_ENV = "MODAL_WORKSPACE_LOCAL_SECRETS_FILE"
ALLOWED_HOSTS_ENV = "MODAL_WORKSPACE_ALLOWED_HOSTS"
AGENT_TIMEOUT_ENV = "MODAL_WORKSPACE_AGENT_TIMEOUT"
HOST_PORTS_ENV = "MODAL_WORKSPACE_HOST_PORTS"
TRUSTED_PROXIES_ENV = "MODAL_WORKSPACE_TRUSTED_PROXIES"
PUBLIC_URL_ENV = "MODAL_WORKSPACE_PUBLIC_URL"
GITHUB_URL_ENV = "MODAL_WORKSPACE_GITHUB_URL"
GITHUB_API_URL_ENV = "MODAL_WORKSPACE_GITHUB_API_URL"
# A GitHub App the gateway mints per-operation installation tokens with (`git/credentials.py`):
# its id, its private key (PEM, or a file holding it) and, optionally, one installation to use
# (else the App's installation on each repository's owner is looked up).
GITHUB_APP_ID_ENV = "MODAL_WORKSPACE_GITHUB_APP_ID"
GITHUB_APP_KEY_ENV = "MODAL_WORKSPACE_GITHUB_APP_PRIVATE_KEY"
GITHUB_APP_KEY_FILE_ENV = "MODAL_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE"
GITHUB_APP_INSTALLATION_ENV = "MODAL_WORKSPACE_GITHUB_APP_INSTALLATION_ID"
# Who `repo_commit` records as author and committer when the request names nobody.
GIT_AUTHOR_NAME_ENV = "MODAL_WORKSPACE_GIT_AUTHOR_NAME"
GIT_AUTHOR_EMAIL_ENV = "MODAL_WORKSPACE_GIT_AUTHOR_EMAIL"
DEFAULT_GIT_AUTHOR_NAME = "Workspace agent"
DEFAULT_GIT_AUTHOR_EMAIL = "agent@workspace.invalid"
ALLOW_GITHUB_SECRET_ENV = "MODAL_WORKSPACE_ALLOW_GITHUB_SECRET_IN_WORKSPACES"
CHANNEL_SECRET_ENV = "MODAL_WORKSPACE_CHANNEL_SECRET"
ISOLATION_ENV = "MODAL_WORKSPACE_ISOLATION"
DISK_MB_ENV = "MODAL_WORKSPACE_DISK_MB"
# What local snapshots may hold on the host: per workspace (default: twice its disk), for the
# whole data root (default: half its file system), and the free space a copy leaves.
SNAPSHOT_BUDGET_ENV = "MODAL_WORKSPACE_SNAPSHOT_BUDGET_MB"
SNAPSHOTS_BUDGET_ENV = "MODAL_WORKSPACE_SNAPSHOTS_BUDGET_MB"
SNAPSHOT_FREE_FLOOR_ENV = "MODAL_WORKSPACE_SNAPSHOT_FREE_FLOOR_MB"
DEFAULT_SNAPSHOT_FREE_FLOOR_MB = 1024
# The lifecycle sweep (`janitor.py`): how often it runs (0: never), how long before a lifetime
# ends it takes a safety snapshot, how long suspended and terminated workspaces are kept.
JANITOR_SECONDS_ENV = "MODAL_WORKSPACE_JANITOR_SECONDS"
SAFETY_MARGIN_ENV = "MODAL_WORKSPACE_SAFETY_MARGIN_SECONDS"
RETENTION_ENV = "MODAL_WORKSPACE_RETENTION_SECONDS"
DEFAULT_JANITOR_SECONDS = 30
# How often a gateway sends a frame on an open agent channel (the agent ends a connection
# silent for three times as long: a killed gateway leaves nothing running after that).
KEEPALIVE_ENV = "MODAL_WORKSPACE_CHANNEL_KEEPALIVE_SECONDS"
DEFAULT_SAFETY_MARGIN_SECONDS = 300
DEFAULT_RETENTION_SECONDS = 30 * 24 * 3600
DEFAULT_DISK_MB = 10_240
MIN_CHANNEL_SECRET_CHARS = 32
# What the GitHub secret holds, and so the gateway's variable once the secret is attached to it.
GITHUB_TOKEN_ENV = "GH_TOKEN"
DEFAULT_GITHUB_URL = "https://github.com"
DEFAULT_GITHUB_API_URL = "https://api.github.com"

# Deployed Modal Functions agents may call (`APP/FUNCTION,…`; empty: the function operations are
# off), and whether those operations enter the GPT Actions schema (`operations/functions.py`).
ALLOWED_FUNCTIONS_ENV = "MODAL_WORKSPACE_ALLOWED_FUNCTIONS"
FUNCTIONS_IN_ACTIONS_ENV = "MODAL_WORKSPACE_FUNCTIONS_IN_ACTIONS"

# Artifacts (`operations/artifacts.py`): the most one upload or download may hold, and how
# long a download link lives.
ARTIFACT_MAX_BYTES_ENV = "MODAL_WORKSPACE_ARTIFACT_MAX_BYTES"
ARTIFACT_LINK_SECONDS_ENV = "MODAL_WORKSPACE_ARTIFACT_LINK_SECONDS"
DEFAULT_ARTIFACT_MAX_BYTES = 1 << 30
MAX_ARTIFACT_MAX_BYTES = 16 << 30  # the agent's own bound on a staged archive
DEFAULT_ARTIFACT_LINK_SECONDS = 600
MAX_ARTIFACT_LINK_SECONDS = 3600

MIN_TOKEN_CHARS = 8
# How long the gateway waits for a workspace agent's answer (on top of a long-poll's own wait)
# before it answers 504: long enough for a busy agent, short enough that a stopped one does not
# hold the caller.
DEFAULT_AGENT_TIMEOUT = 30.0
MAX_AGENT_TIMEOUT = 600.0
DriverName = Literal["local", "modal"]
IsolationMode = Literal["auto", "bwrap", "none"]


class ConfigError(ValueError):
    """A setting is wrong; the message names the variable and never quotes a secret."""


def setting_error(message: str, _setting: str | None) -> ConfigError:
    """The core's refusal of a setting (`errors.core_refusal`), as a `ConfigError`."""
    return ConfigError(message)


class Settings(BaseModel):
    """Everything the gateway reads from its environment."""

    model_config = ConfigDict(frozen=True)

    tokens: tuple[str, ...] = ()
    # Where the tokens came from, for people: a variable name or a file path, never a value.
    token_source: str | None = None
    driver: DriverName = "local"
    data_root: Path
    allowed_secrets: tuple[str, ...] = ()
    # secret name -> the variables it holds, where the allowlist lists them
    # (`openai:OPENAI_API_KEY`): their values are redacted from every command's output.
    secret_keys: Mapping[str, tuple[str, ...]] = {}
    allowed_volumes: tuple[str, ...] = ()
    github_secret: str = "github"
    # secret name -> {ENV_NAME: value}; locally from MODAL_WORKSPACE_LOCAL_SECRETS_FILE.
    secret_values: Mapping[str, Mapping[str, str]] = {}
    allowed_hosts: tuple[str, ...] = ()
    # Files of the operator's that hold secrets (the token file, the local secrets file): the
    # local driver refuses to start when a sandbox would see one.
    private_files: tuple[Path, ...] = ()
    # Local driver: the host loopback ports workspaces may reach (none by default).
    host_ports: tuple[int, ...] = ()
    agent_timeout: float = DEFAULT_AGENT_TIMEOUT
    # Peers (addresses or networks) whose X-Forwarded-* headers are believed; nobody's else.
    trusted_proxies: tuple[str, ...] = ()
    # The base URL clients reach the gateway by (the Actions schema's `servers`), when known.
    public_url: str | None = None
    # Where git reaches GitHub (`OWNER/REPO` inputs are rebuilt onto it) and where its REST API
    # is; canonical (`github_base`): a GitHub Enterprise server, or a test server.
    github_url: str = DEFAULT_GITHUB_URL
    github_api_url: str = DEFAULT_GITHUB_API_URL
    # Whether `secret_names` may name the GitHub secret (every command would then hold it).
    allow_github_secret_in_workspaces: bool = False
    # Modal driver: the GitHub token as the gateway holds it (`GH_TOKEN` of the GitHub secret,
    # which `modal_app.py` attaches to the gateway, not to sandboxes). Never printed.
    github_token: str | None = None
    # The GitHub App, when configured: its id, private key (never printed) and installation.
    github_app_id: str | None = None
    github_app_private_key: str | None = None
    github_app_installation_id: int | None = None
    git_author_name: str = DEFAULT_GIT_AUTHOR_NAME
    git_author_email: str = DEFAULT_GIT_AUTHOR_EMAIL
    # Modal driver: what each workspace's channel key is derived from
    # (MODAL_WORKSPACE_CHANNEL_SECRET, else the bearer tokens). Never printed.
    configured_channel_secret: str | None = None
    # Local driver: bubblewrap where it works (auto), required (bwrap) or never (none); and the
    # size of each workspace's own disk, where the gateway can mount one.
    isolation: IsolationMode = "auto"
    disk_mb: int = DEFAULT_DISK_MB
    # Local snapshots' byte budgets in MiB (None: the defaults above) and free-space floor.
    snapshot_budget_mb: int | None = None
    snapshots_budget_mb: int | None = None
    snapshot_free_floor_mb: int = DEFAULT_SNAPSHOT_FREE_FLOOR_MB
    janitor_seconds: int = DEFAULT_JANITOR_SECONDS
    safety_margin_seconds: int = DEFAULT_SAFETY_MARGIN_SECONDS
    retention_seconds: int = DEFAULT_RETENTION_SECONDS
    channel_keepalive_seconds: int = CHANNEL_KEEPALIVE_SECONDS
    # Modal driver: its own section (`ModalSettings`), read when the driver is Modal.
    modal: Any = None
    # The deployed functions agents may call, as `app/function`; empty: the operations are off.
    allowed_functions: tuple[str, ...] = ()
    functions_in_actions: bool = False
    # Artifacts: the most bytes one upload or download holds, and a download link's lifetime.
    artifact_max_bytes: int = DEFAULT_ARTIFACT_MAX_BYTES
    artifact_link_seconds: int = DEFAULT_ARTIFACT_LINK_SECONDS

    @property
    def channel_secret(self) -> bytes | None:
        """What every gateway of a deployment derives a workspace's channel key from: the
        configured secret, else the bearer tokens (rotating them then changes every key, and a
        running Modal workspace refuses the gateway until it is recreated: set
        MODAL_WORKSPACE_CHANNEL_SECRET to keep keys across rotations). None without either."""
        if self.configured_channel_secret:
            return hashlib.sha256(
                f"mwc-channel-secret\x00{self.configured_channel_secret}".encode()
            ).digest()
        if not self.tokens:
            return None
        joined = "\x00".join(sorted(self.tokens))
        return hashlib.sha256(f"mwc-channel\x00{joined}".encode()).digest()

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
        if self.configured_channel_secret:
            return hashlib.sha256(
                f"mwc-link-secret\x00{self.configured_channel_secret}".encode()
            ).digest()
        if not self.tokens:
            return None
        joined = "\x00".join(sorted(self.tokens))
        return hashlib.sha256(f"mwc-link\x00{joined}".encode()).digest()

    def __repr__(self) -> str:
        # Tokens and secret values stay out of every repr, log line and traceback.
        return (
            f"Settings(driver={self.driver!r}, data_root={str(self.data_root)!r}, "
            f"tokens={len(self.tokens)}, secrets={sorted(self.secret_values)})"
        )

    __str__ = __repr__


def default_data_root(environ: Mapping[str, str] | None = None) -> Path:
    """The user's data directory: `$XDG_DATA_HOME/modal-workspace`, else `~/.local/share/…`."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "modal-workspace"


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def _check_token(token: str, source: str) -> str:
    if not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
        raise ConfigError(f"{source}: a token must be printable ASCII without spaces")
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"{source}: a token must be at least {MIN_TOKEN_CHARS} characters "
            "(`modal-workspace token` mints a good one)"
        )
    return token


def _load_tokens(env: Mapping[str, str]) -> tuple[tuple[str, ...], str | None]:
    tokens = [_check_token(t, TOKEN_ENV) for t in _split(env.get(TOKEN_ENV))]
    source = TOKEN_ENV if tokens else None
    path = env.get(TOKEN_FILE_ENV)
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{TOKEN_FILE_ENV}: cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            # The decoder's message quotes the file's bytes: a token must never reach a log.
            raise ConfigError(f"{TOKEN_FILE_ENV}: {path} is not UTF-8 text") from None
        from_file = [_check_token(t, TOKEN_FILE_ENV) for t in _split(text.replace("\n", ",")) if t]
        if not from_file:
            raise ConfigError(f"{TOKEN_FILE_ENV}: {path} holds no token")
        tokens.extend(from_file)
        source = f"{source} and {path}" if source else path
    return tuple(dict.fromkeys(tokens)), source


def _load_allowlists(
    env: Mapping[str, str],
) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]], tuple[str, ...]]:
    """The secret allowlist (names, and the variables listed for them) and the volume one."""
    with core_refusal(ALLOWED_SECRETS_ENV, error=setting_error):
        secrets = secret_allowlist(env.get(ALLOWED_SECRETS_ENV, ""))
    with core_refusal(ALLOWED_VOLUMES_ENV, error=setting_error):
        volumes = name_allowlist(env.get(ALLOWED_VOLUMES_ENV, ""))
    keys = {name: listed for name, listed in secrets.items() if listed}
    return tuple(secrets), keys, tuple(volumes)


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


def _base_url(env: Mapping[str, str], name: str, default: str) -> str:
    with core_refusal(name, error=setting_error):
        return github_base(env.get(name) or default)


def _flag(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "").strip().lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise ConfigError(f"{name}: use 1 or 0 (true or false), not {value[:16]!r}")


def _load_secret_values(path: str | None) -> dict[str, dict[str, str]]:
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{LOCAL_SECRETS_FILE_ENV}: cannot read {path}: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError):
        raise ConfigError(f"{LOCAL_SECRETS_FILE_ENV}: {path} is not valid JSON") from None
    shape = '{"secret-name": {"ENV_NAME": "value"}}'
    if not isinstance(data, dict):
        raise ConfigError(f"{LOCAL_SECRETS_FILE_ENV}: {path} must hold an object like {shape}")
    secrets: dict[str, dict[str, str]] = {}
    for name, values in data.items():
        if not isinstance(values, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in values.items()
        ):
            raise ConfigError(
                f"{LOCAL_SECRETS_FILE_ENV}: secret {name!r} must map names to strings ({shape})"
            )
        for key in values:
            about = f"{LOCAL_SECRETS_FILE_ENV}: secret {name!r}"
            with core_refusal(LOCAL_SECRETS_FILE_ENV, about=about, error=setting_error):
                env_name(key)
        secrets[name] = dict(values)
    return secrets


def _load_agent_timeout(value: str | None) -> float:
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


def _load_trusted_proxies(value: str | None) -> tuple[str, ...]:
    proxies = []
    for part in _split(value):
        try:
            network = ipaddress.ip_network(part, strict=False)
        except ValueError:
            raise ConfigError(
                f"{TRUSTED_PROXIES_ENV}: {part[:64]!r} is not an IP address or network "
                "(e.g. 10.0.0.5,192.168.0.0/24)"
            ) from None
        proxies.append(str(network.network_address) if network.num_addresses == 1 else str(network))
    return tuple(proxies)


def _load_public_url(value: str | None) -> str | None:
    if not value:
        return None
    shape = "like https://gateway.example.com"
    try:
        url = urllib.parse.urlsplit(value.strip())
        url.port  # noqa: B018  # raises on a malformed port
    except ValueError:
        raise ConfigError(f"{PUBLIC_URL_ENV}: not a URL ({shape})") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ConfigError(f"{PUBLIC_URL_ENV}: an http(s) URL with a host name, {shape}")
    if url.username is not None or url.password is not None or url.query or url.fragment:
        raise ConfigError(f"{PUBLIC_URL_ENV}: no credentials, query or fragment ({shape})")
    if not value.strip().isascii() or any(
        c.isspace() or not c.isprintable() for c in value.strip()
    ):
        raise ConfigError(f"{PUBLIC_URL_ENV}: printable ASCII without spaces ({shape})")
    return urllib.parse.urlunsplit((url.scheme, url.netloc, url.path.rstrip("/"), "", ""))


def parse_host_ports(text: str | None) -> tuple[int, ...]:
    ports = []
    for part in _split(text):
        if not part.isdigit() or not 0 < int(part) < 65536:
            raise ConfigError(
                f"{HOST_PORTS_ENV} must list TCP ports (1-65535) separated by commas, "
                f"not {part[:16]!r}"
            )
        ports.append(int(part))
    return tuple(ports)


def load_settings(
    environ: Mapping[str, str] | None = None,
    *,
    driver: str | None = None,
    data_root: str | Path | None = None,
) -> Settings:
    """Reads every setting once; `driver` and `data_root` (command-line flags) win over the
    environment. Raises `ConfigError` naming the variable that is wrong."""
    env = os.environ if environ is None else environ
    tokens, source = _load_tokens(env)
    chosen = driver or env.get(DRIVER_ENV) or "local"
    if chosen not in ("local", "modal"):
        raise ConfigError(f"{DRIVER_ENV}: unknown driver {chosen[:32]!r}; use 'local' or 'modal'")
    root = Path(data_root or env.get(DATA_ROOT_ENV) or default_data_root(env)).expanduser()
    allowed_secrets, secret_keys, allowed_volumes = _load_allowlists(env)
    secret_values = _load_secret_values(env.get(LOCAL_SECRETS_FILE_ENV))
    _check_listed_keys(secret_values, secret_keys)
    return Settings(
        tokens=tokens,
        token_source=source,
        driver=chosen,  # type: ignore[arg-type]  # checked just above
        data_root=root,
        allowed_secrets=allowed_secrets,
        secret_keys=secret_keys,
        allowed_volumes=allowed_volumes,
        github_secret=env.get(GITHUB_SECRET_ENV) or "github",
        secret_values=secret_values,
        allowed_hosts=_split(env.get(ALLOWED_HOSTS_ENV)),
        private_files=tuple(
            Path(env[name]).expanduser()
            for name in (TOKEN_FILE_ENV, LOCAL_SECRETS_FILE_ENV, GITHUB_APP_KEY_FILE_ENV)
            if env.get(name)
        ),
        host_ports=parse_host_ports(env.get(HOST_PORTS_ENV)),
        agent_timeout=_load_agent_timeout(env.get(AGENT_TIMEOUT_ENV)),
        trusted_proxies=_load_trusted_proxies(env.get(TRUSTED_PROXIES_ENV)),
        public_url=_load_public_url(env.get(PUBLIC_URL_ENV)),
        github_url=_base_url(env, GITHUB_URL_ENV, DEFAULT_GITHUB_URL),
        github_api_url=_base_url(env, GITHUB_API_URL_ENV, DEFAULT_GITHUB_API_URL),
        allow_github_secret_in_workspaces=_flag(env, ALLOW_GITHUB_SECRET_ENV),
        github_token=(env.get(GITHUB_TOKEN_ENV) or None) if chosen == "modal" else None,
        configured_channel_secret=_load_channel_secret(env.get(CHANNEL_SECRET_ENV)),
        isolation=_load_isolation(env.get(ISOLATION_ENV)),
        disk_mb=_load_disk_mb(env.get(DISK_MB_ENV)),
        snapshot_budget_mb=_load_mib(env, SNAPSHOT_BUDGET_ENV, None),
        snapshots_budget_mb=_load_mib(env, SNAPSHOTS_BUDGET_ENV, None),
        snapshot_free_floor_mb=_load_mib(
            env, SNAPSHOT_FREE_FLOOR_ENV, DEFAULT_SNAPSHOT_FREE_FLOOR_MB, least=0
        ),
        janitor_seconds=_load_seconds(env, JANITOR_SECONDS_ENV, DEFAULT_JANITOR_SECONDS, 0),
        safety_margin_seconds=_load_seconds(
            env, SAFETY_MARGIN_ENV, DEFAULT_SAFETY_MARGIN_SECONDS, 0
        ),
        retention_seconds=_load_seconds(env, RETENTION_ENV, DEFAULT_RETENTION_SECONDS, 1),
        channel_keepalive_seconds=_load_seconds(
            env, KEEPALIVE_ENV, CHANNEL_KEEPALIVE_SECONDS, 1, most=300
        ),
        modal=_load_modal(env) if chosen == "modal" else None,
        **_load_functions(env),
        **_load_artifacts(env),
        **_load_github_app(env),
        **_load_git_author(env),
    )


def _load_artifacts(env: Mapping[str, str]) -> dict[str, Any]:
    size = (env.get(ARTIFACT_MAX_BYTES_ENV) or "").strip()
    if size and (not size.isdigit() or not 1 << 20 <= int(size) <= MAX_ARTIFACT_MAX_BYTES):
        raise ConfigError(
            f"{ARTIFACT_MAX_BYTES_ENV} must be bytes from 1048576 to {MAX_ARTIFACT_MAX_BYTES}, "
            f"not {size[:24]!r}"
        )
    return {
        "artifact_max_bytes": int(size) if size else DEFAULT_ARTIFACT_MAX_BYTES,
        "artifact_link_seconds": _load_seconds(
            env,
            ARTIFACT_LINK_SECONDS_ENV,
            DEFAULT_ARTIFACT_LINK_SECONDS,
            1,
            most=MAX_ARTIFACT_LINK_SECONDS,
        ),
    }


def _load_github_app(env: Mapping[str, str]) -> dict[str, Any]:
    app_id = (env.get(GITHUB_APP_ID_ENV) or "").strip()
    key = env.get(GITHUB_APP_KEY_ENV) or ""
    if not key and env.get(GITHUB_APP_KEY_FILE_ENV):
        path = Path(env[GITHUB_APP_KEY_FILE_ENV]).expanduser()
        try:
            key = path.read_text()
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
        return {}
    if not app_id.isdigit() or len(app_id) > 20:
        raise ConfigError(f"{GITHUB_APP_ID_ENV}: a GitHub App id is a number")
    if "PRIVATE KEY-----" not in key:
        raise ConfigError(
            f"{GITHUB_APP_ID_ENV} is set, so {GITHUB_APP_KEY_ENV} (or {GITHUB_APP_KEY_FILE_ENV}) "
            "must hold the App's private key in PEM form"
        )
    if installation and (not installation.isdigit() or len(installation) > 20):
        raise ConfigError(f"{GITHUB_APP_INSTALLATION_ENV}: an installation id is a number")
    return {
        "github_app_id": app_id,
        "github_app_private_key": key,
        "github_app_installation_id": int(installation) if installation else None,
    }


def _load_git_author(env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, key, check in (
        (GIT_AUTHOR_NAME_ENV, "git_author_name", author_name),
        (GIT_AUTHOR_EMAIL_ENV, "git_author_email", author_email),
    ):
        if value := env.get(name):
            with core_refusal(name, error=setting_error):
                out[key] = check(value)
    return out


def _load_functions(env: Mapping[str, str]) -> dict[str, Any]:
    with core_refusal(ALLOWED_FUNCTIONS_ENV, error=setting_error):
        allowed = tuple(function_allowlist(env.get(ALLOWED_FUNCTIONS_ENV, "")))
    in_actions = _flag(env, FUNCTIONS_IN_ACTIONS_ENV)
    if in_actions and not allowed:
        raise ConfigError(
            f"{FUNCTIONS_IN_ACTIONS_ENV} is set but {ALLOWED_FUNCTIONS_ENV} is empty: list the "
            "functions (APP/FUNCTION) agents may call, or unset it"
        )
    return {"allowed_functions": allowed, "functions_in_actions": in_actions}


def _load_isolation(value: str | None) -> IsolationMode:
    mode = (value or "auto").strip()
    if mode not in ("auto", "bwrap", "none"):
        raise ConfigError(f"{ISOLATION_ENV} must be auto, bwrap or none, not {mode[:32]!r}")
    return mode  # type: ignore[return-value]  # checked just above


def _load_seconds(
    env: Mapping[str, str], name: str, default: int, least: int, most: int = 366 * 24 * 3600
) -> int:
    value = (env.get(name) or "").strip()
    if not value:
        return default
    if not value.isdigit() or not least <= int(value) <= most:
        raise ConfigError(f"{name} must be seconds from {least} to {most}, not {value[:16]!r}")
    return int(value)


def _load_disk_mb(value: str | None) -> int:
    if not value:
        return DEFAULT_DISK_MB
    if not value.strip().isdigit() or not 64 <= int(value) <= 16 << 20:
        raise ConfigError(
            f"{DISK_MB_ENV} must be a size in MiB from 64 to 16777216, not {value.strip()[:16]!r}"
        )
    return int(value)


def _load_mib(env: Mapping[str, str], name: str, default: int | None, least: int = 1) -> Any:
    value = (env.get(name) or "").strip()
    if not value:
        return default
    most = 1 << 30
    if not value.isdigit() or not least <= int(value) <= most:
        raise ConfigError(
            f"{name} must be a size in MiB from {least} to {most}, not {value[:16]!r}"
        )
    return int(value)


def _load_modal(env: Mapping[str, str]) -> ModalSettings:
    # Imported here, on purpose: the Modal section's parsing lives with the Modal driver, whose
    # modules load the Modal SDK, which a gateway on another driver never needs.
    from .drivers.modal.config import ModalSettings

    try:
        return ModalSettings.from_env(env)
    except WorkspaceError as exc:
        raise ConfigError(exc.message) from None


def _load_channel_secret(value: str | None) -> str | None:
    if not value:
        return None
    if len(value.strip()) < MIN_CHANNEL_SECRET_CHARS:
        raise ConfigError(
            f"{CHANNEL_SECRET_ENV}: at least {MIN_CHANNEL_SECRET_CHARS} characters "
            "(`modal-workspace token` mints a good one)"
        )
    return value.strip()
