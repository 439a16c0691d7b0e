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

from ...errors import InvalidArgumentError

__all__ = ["channel_key", "launch_config", "resolve_channel_secret"]


def resolve_channel_secret(configured: bytes | None) -> bytes:
    """The configured secret, else one derived from the Modal token secret this process uses."""
    if configured:
        return configured
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


def launch_config(key: str) -> bytes:
    """What the daemon reads from its stdin (`mwc-agent daemon --config -`): the key alone, so
    the sandbox's own environment stays the workspace's."""
    return json.dumps({"channel_key": key}).encode()
