"""Whether this process can authenticate to Modal, decided the way the SDK will decide it at its
first call (`modal.client._Client.from_env`) and without a network call: a gateway on the Modal
driver that has no credentials refuses to start with one line saying what to do.

The SDK takes credentials from its configuration (`modal.config`): `MODAL_TOKEN_ID` and
`MODAL_TOKEN_SECRET` (or the `MODAL_OAUTH_*` set), else the active profile of `~/.modal.toml`
(`MODAL_CONFIG_PATH`, `MODAL_PROFILE`). Inside a Modal container it uses the container's own
credentials and ignores those, so nothing is required there.
"""

from __future__ import annotations

import modal
import modal.config

from ...errors import UpstreamError

__all__ = ["require_credentials"]

# What an operator does about it: `modal token new` prints a link to open in any browser (so it
# works on a machine without one too) and stores the token in the active profile.
WHAT_TO_DO = (
    "run `modal token new` (without a browser here, open the link it prints on any other "
    "machine), or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"
)


def require_credentials() -> None:
    """Raises `UpstreamError` when the SDK would find no credentials to call Modal with."""
    if _in_a_modal_container():
        return
    problem = _credentials_problem()
    if problem is not None:
        raise UpstreamError("upstream", f"{problem}: {WHAT_TO_DO}")


def _in_a_modal_container() -> bool:
    # `is_local()` is False in a Modal Function's container (the deployed gateway); the SDK
    # itself switches to the container's credentials on `MODAL_IS_REMOTE` (`_is_remote`).
    return not modal.is_local() or modal.config._is_remote()


def _credentials_problem() -> str | None:
    """What keeps the SDK from authenticating, in a few words; None when nothing does."""
    config = modal.config.config
    token = (config.get("token_id"), config.get("token_secret"))
    oauth_keys = ("oauth_refresh_token", "oauth_client_id", "oauth_client_secret", "oauth_jwt_key")
    refresh, client, secret, jwt = (config.get(key) for key in oauth_keys)
    if any(token) and any((refresh, client, secret, jwt)):
        return "both a Modal token and Modal OAuth credentials are configured (the SDK takes one)"
    if any((refresh, client, secret, jwt)):
        if refresh and client and bool(secret) != bool(jwt):
            return None
        return "Modal's OAuth credentials are incomplete"
    if all(token):
        return None
    # The SDK's module-level view of where its profile lives (read once, when it was imported).
    where = f"profile {modal.config._profile!r} of {modal.config.user_config_path}"
    return f"no Modal token in the environment or in {where}"
