"""How each setting reaches the gateway deployed on Modal (`modal deploy modal_app.py`): copied into
its image's environment from where `modal deploy` runs, kept in a Modal Secret attached to it, set
by `modal_app.py` itself, read by `modal deploy` alone, or not applying there, and why.

One declaration, read twice: `modal_app.py` forwards exactly the settings declared `FORWARDED`,
and `tests/test_deployed_settings.py` holds every variable `load_settings` reads and every row of
README's Settings table to it, and the built image's environment to it: a new setting fails the
tests until it is declared here. A secret is never forwarded: an image's environment is visible
to anyone who can see the app.

It imports nothing, not even of this package: `modal_app.py` loads it by its path on a machine
where only `modal` is installed.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "AT_DEPLOY",
    "FORWARDED",
    "IN_SECRET",
    "NOT_DEPLOYED",
    "ROUTES",
    "SECRETS",
    "SETTINGS",
    "SET_BY_DEPLOY",
    "Route",
    "forwarded_settings",
]

# Copied into the gateway image's environment when set where `modal deploy` runs.
FORWARDED = "forwarded"
# Kept in a Modal Secret attached to the gateway (never to a sandbox), never in the image.
IN_SECRET = "in a Modal Secret"
# Given its value in the image by `modal_app.py`, whatever the deploying machine says.
SET_BY_DEPLOY = "set by modal_app.py"
# Read where `modal deploy` runs, to say how to deploy; the gateway never reads it.
AT_DEPLOY = "read by modal deploy"
# Not a setting of a gateway on Modal.
NOT_DEPLOYED = "not on Modal"

# The settings that name the Modal Secrets attached to the gateway (`modal_app.gateway_secrets`),
# by what each holds. (Not constants of their own: the configuration declares each variable it
# reads once, as a constant, `tests/test_settings_read_once.py`, and this module reads none.)
SECRETS = {
    "the gateway's": "MODAL_WORKSPACE_SECRET",
    "GitHub's": "MODAL_WORKSPACE_GITHUB_SECRET",
    "the GitHub App's": "MODAL_WORKSPACE_GITHUB_APP_SECRET",
}

_LOCAL = "the local driver's"
_CLIENT = "the command-line client's: the gateway it calls, not a setting of a gateway"
_A_FILE = "a file on the serving machine, which a deployed gateway does not have"


class Route(NamedTuple):
    """How one setting reaches the deployed gateway: `how` (one of the kinds above), the setting
    naming the Modal Secret that holds it (`IN_SECRET`), and why, where it is not forwarded."""

    how: str
    why: str = ""
    secret: str | None = None


def _forwarded() -> Route:
    return Route(FORWARDED)


def _in_secret(secret: str, why: str) -> Route:
    return Route(IN_SECRET, why, secret)


SETTINGS: dict[str, Route] = {
    # Who may call, and the keys derived from it (config/access.py).
    "MODAL_WORKSPACE_MCP_TOKEN": _in_secret(
        SECRETS["the gateway's"], "the bearer tokens are secrets"
    ),
    "MODAL_WORKSPACE_MCP_TOKEN_FILE": Route(
        NOT_DEPLOYED, f"{_A_FILE}: its tokens are MODAL_WORKSPACE_MCP_TOKEN in its Modal Secret"
    ),
    "MODAL_WORKSPACE_CHANNEL_SECRET": _in_secret(
        SECRETS["the gateway's"], "what channel keys derive from"
    ),
    # How the gateway serves (config/gateway.py).
    "MODAL_WORKSPACE_DRIVER": Route(SET_BY_DEPLOY, "always modal: the deployed gateway's driver"),
    "MODAL_WORKSPACE_ALLOWED_HOSTS": _forwarded(),
    "MODAL_WORKSPACE_TRUSTED_PROXIES": Route(
        NOT_DEPLOYED,
        "Modal's proxy is the only way in and hands the app the client's own address, so no "
        "proxy needs trusting (addresses trusted where `modal deploy` runs mean nothing there)",
    ),
    "MODAL_WORKSPACE_PUBLIC_URL": _forwarded(),
    "MODAL_WORKSPACE_PREVIEW_HOST": Route(
        NOT_DEPLOYED,
        "previews on Modal are the sandboxes' own tunnels; the preview proxy serves the local "
        "driver only",
    ),
    "MODAL_WORKSPACE_AGENT_TIMEOUT": _forwarded(),
    "MODAL_WORKSPACE_CHANNEL_KEEPALIVE_SECONDS": _forwarded(),
    # The local driver (config/local.py).
    "MODAL_WORKSPACE_DATA_ROOT": Route(NOT_DEPLOYED, _LOCAL),
    "XDG_DATA_HOME": Route(NOT_DEPLOYED, f"where {_LOCAL} data root is by default"),
    "MODAL_WORKSPACE_ISOLATION": Route(NOT_DEPLOYED, _LOCAL),
    "MODAL_WORKSPACE_DISK_MB": Route(NOT_DEPLOYED, _LOCAL),
    "MODAL_WORKSPACE_HOST_PORTS": Route(NOT_DEPLOYED, _LOCAL),
    "MODAL_WORKSPACE_SNAPSHOT_BUDGET_MB": Route(NOT_DEPLOYED, _LOCAL),
    "MODAL_WORKSPACE_SNAPSHOTS_BUDGET_MB": Route(NOT_DEPLOYED, _LOCAL),
    "MODAL_WORKSPACE_SNAPSHOT_FREE_FLOOR_MB": Route(NOT_DEPLOYED, _LOCAL),
    # What workspaces may name (config/allowlists.py).
    "MODAL_WORKSPACE_ALLOWED_SECRETS": _forwarded(),
    "MODAL_WORKSPACE_ALLOWED_VOLUMES": _forwarded(),
    "MODAL_WORKSPACE_ALLOWED_GPUS": _forwarded(),
    "MODAL_WORKSPACE_LOCAL_SECRETS_FILE": Route(
        NOT_DEPLOYED,
        f"{_LOCAL} secret values; on Modal a workspace's secrets are Modal Secrets by name",
    ),
    # GitHub (config/github.py).
    "MODAL_WORKSPACE_GITHUB_SECRET": _forwarded(),
    "MODAL_WORKSPACE_GITHUB_URL": _forwarded(),
    "MODAL_WORKSPACE_GITHUB_API_URL": _forwarded(),
    "MODAL_WORKSPACE_ALLOW_GITHUB_SECRET_IN_WORKSPACES": _forwarded(),
    "GH_TOKEN": _in_secret(
        SECRETS["GitHub's"], "the GitHub token, attached when it is allowlisted"
    ),
    "MODAL_WORKSPACE_GITHUB_APP_ID": _in_secret(
        SECRETS["the GitHub App's"], "beside the App's key"
    ),
    "MODAL_WORKSPACE_GITHUB_APP_PRIVATE_KEY": _in_secret(
        SECRETS["the GitHub App's"], "the GitHub App's private key"
    ),
    "MODAL_WORKSPACE_GITHUB_APP_PRIVATE_KEY_FILE": Route(
        NOT_DEPLOYED,
        f"{_A_FILE}: its key is MODAL_WORKSPACE_GITHUB_APP_PRIVATE_KEY in the App's Modal Secret",
    ),
    "MODAL_WORKSPACE_GITHUB_APP_INSTALLATION_ID": _forwarded(),
    "MODAL_WORKSPACE_GIT_AUTHOR_NAME": _forwarded(),
    "MODAL_WORKSPACE_GIT_AUTHOR_EMAIL": _forwarded(),
    # The lifecycle sweep, functions, artifacts, OAuth.
    "MODAL_WORKSPACE_JANITOR_SECONDS": _forwarded(),
    "MODAL_WORKSPACE_SAFETY_MARGIN_SECONDS": _forwarded(),
    "MODAL_WORKSPACE_RETENTION_SECONDS": _forwarded(),
    "MODAL_WORKSPACE_TEMPLATE_CHECK_SECONDS": _forwarded(),
    "MODAL_WORKSPACE_ALLOWED_FUNCTIONS": _forwarded(),
    "MODAL_WORKSPACE_FUNCTIONS_IN_ACTIONS": _forwarded(),
    "MODAL_WORKSPACE_ARTIFACT_MAX_BYTES": _forwarded(),
    "MODAL_WORKSPACE_ARTIFACT_LINK_SECONDS": _forwarded(),
    "MODAL_WORKSPACE_OAUTH_TOKEN_SECONDS": _forwarded(),
    # The Modal driver (config/modal.py).
    "MODAL_WORKSPACE_SANDBOX_APP": _forwarded(),
    "MODAL_WORKSPACE_DEFAULT_IMAGE_NAME": _forwarded(),
    "MODAL_WORKSPACE_CHANNEL_IDLE_SECONDS": _forwarded(),
    "MODAL_WORKSPACE_DEFAULT_IDLE_TIMEOUT_SECONDS": _forwarded(),
    "MODAL_WORKSPACE_STATE_VOLUME": _forwarded(),
    "MODAL_WORKSPACE_WARM_POOL": _forwarded(),
    "MODAL_WORKSPACE_WHEEL": Route(
        SET_BY_DEPLOY,
        "the wheel installed in the image; where `modal deploy` runs it names a wheel to "
        "install instead of one built from the checkout",
    ),
    # The command-line client (config/client.py): where it finds a gateway, not a gateway's own.
    "MODAL_WORKSPACE_URL": Route(NOT_DEPLOYED, _CLIENT),
    "MODAL_WORKSPACE_TOKEN": Route(NOT_DEPLOYED, _CLIENT),
    "MODAL_WORKSPACE_TOKEN_FILE": Route(NOT_DEPLOYED, _CLIENT),
    # `modal deploy` itself (modal_app.py).
    "MODAL_WORKSPACE_APP_NAME": Route(AT_DEPLOY, "the name of the gateway's app"),
    SECRETS["the gateway's"]: Route(AT_DEPLOY, "the Modal Secret that holds the gateway's token"),
    SECRETS["the GitHub App's"]: Route(AT_DEPLOY, "the Modal Secret that holds the App's key"),
}

ROUTES = (FORWARDED, IN_SECRET, SET_BY_DEPLOY, AT_DEPLOY, NOT_DEPLOYED)


def forwarded_settings() -> tuple[str, ...]:
    """The settings `modal_app.py` copies into the gateway image's environment."""
    return tuple(name for name, route in SETTINGS.items() if route.how == FORWARDED)
