"""The key a Modal workspace's agent requires of the gateway's `Hello`, so that no command in
the sandbox can use the agent's socket: derived per workspace from a secret every gateway of a
deployment shares (`Settings.channel_secret`; for a program using its own Modal credentials, the
Modal token secret), handed to the daemon on its stdin at create, never in argv, an environment,
a tag or a file.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence

from ...errors import InvalidArgumentError
from ..command_user import AGENT_GIT_UID, COMMAND_HOME, COMMAND_UID, COMMAND_USER_NAME

__all__ = ["channel_key", "launch_config", "resolve_channel_secret"]


def resolve_channel_secret(configured: bytes | None) -> bytes:
    """The configured secret, else one derived from the Modal token secret this process uses."""
    if configured:
        return configured
    # Imported here, on purpose: only this fallback reads the SDK's configuration, and the
    # keys themselves (`channel_key`) need no SDK.
    import modal.config

    token_secret = modal.config.config.get("token_secret")
    if token_secret:
        return hashlib.sha256(f"mwc-channel-modal\x00{token_secret}".encode()).digest()
    raise InvalidArgumentError(
        "the Modal driver needs a secret to key its workspaces' agent channels with: set "
        "MODAL_WORKSPACE_MCP_TOKEN or MODAL_WORKSPACE_CHANNEL_SECRET"
    )


def channel_key(secret: bytes, workspace_id: str) -> str:
    """The workspace's key, in hex (what the agent's launch configuration takes)."""
    return hmac.new(
        secret, f"mwc-channel-key\x00{workspace_id}".encode(), hashlib.sha256
    ).hexdigest()


def launch_config(
    key: str, *, run_as_root: bool, first_start: bool, volume_roots: Sequence[str] = ()
) -> bytes:
    """What the daemon reads from its stdin (`mwc-agent daemon --config -`): the key, and unless
    the workspace chose root commands, the users its commands and its git steps run as and the
    commands' home (`drivers.command_user`). No environment: the sandbox's own stays the
    workspace's. `first_start`: no command has run yet, so what the image put in /workspace
    becomes the commands' user's. `volume_roots`: the volumes' mount points, which become the
    commands' user's where they are root's."""
    config: dict[str, object] = {"channel_key": key}
    if not run_as_root:
        config["user"] = {"uid": COMMAND_UID, "gid": COMMAND_UID}
        config["agent_user"] = {"uid": AGENT_GIT_UID, "gid": AGENT_GIT_UID}
        config["home"] = {"path": COMMAND_HOME, "user_name": COMMAND_USER_NAME}
        config["claim_root"] = first_start
        if volume_roots:
            config["volume_roots"] = list(volume_roots)
    return json.dumps(config).encode()
