"""The artifact settings: the bound and the link lifetime within their ranges, and the link key
every gateway of a deployment derives alike (from the channel secret, else the tokens), apart
from every other key."""

from __future__ import annotations

import pytest
from modal_workspace_core.config import ConfigError, load_settings

TOKENS = {"MODAL_WORKSPACE_MCP_TOKEN": "token-one-0123456789,token-two-0123456789"}


def test_defaults_and_bounds() -> None:
    settings = load_settings({})
    assert (settings.artifact_max_bytes, settings.artifact_link_seconds) == (1 << 30, 600)
    chosen = load_settings(
        {
            "MODAL_WORKSPACE_ARTIFACT_MAX_BYTES": str(2 << 20),
            "MODAL_WORKSPACE_ARTIFACT_LINK_SECONDS": "5",
        }
    )
    assert (chosen.artifact_max_bytes, chosen.artifact_link_seconds) == (2 << 20, 5)
    for name, value in (
        ("MODAL_WORKSPACE_ARTIFACT_MAX_BYTES", "1024"),
        ("MODAL_WORKSPACE_ARTIFACT_MAX_BYTES", str((16 << 30) + 1)),
        ("MODAL_WORKSPACE_ARTIFACT_MAX_BYTES", "1GiB"),
        ("MODAL_WORKSPACE_ARTIFACT_LINK_SECONDS", "0"),
        ("MODAL_WORKSPACE_ARTIFACT_LINK_SECONDS", "3601"),
    ):
        with pytest.raises(ConfigError, match=name):
            load_settings({name: value})


def test_the_link_key_is_shared_by_a_deployment_and_kept_apart() -> None:
    one, two = load_settings(TOKENS), load_settings(dict(reversed(list(TOKENS.items()))))
    assert one.link_secret is not None and one.link_secret == two.link_secret
    assert one.link_secret not in (one.channel_secret, one.idempotency_secret)
    secret = {**TOKENS, "MODAL_WORKSPACE_CHANNEL_SECRET": "s" * 40}
    with_secret = load_settings(secret)
    assert with_secret.link_secret not in (None, one.link_secret, with_secret.channel_secret)
    assert load_settings({}).link_secret is None
