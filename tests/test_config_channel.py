"""The secret Modal workspaces' channel keys are derived from: configured, else the tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
from modal_workspace_core.config import ConfigError, Settings, load_settings
from modal_workspace_core.drivers.modal.channel_key import channel_key


def settings(tmp_path: Path, **env: str) -> Settings:
    return load_settings({"MODAL_WORKSPACE_DATA_ROOT": str(tmp_path), **env})


def test_the_channel_secret_comes_from_the_setting_else_the_tokens(tmp_path: Path) -> None:
    assert settings(tmp_path).channel_secret is None
    by_token = settings(tmp_path, MODAL_WORKSPACE_MCP_TOKEN="token-one-abc").channel_secret
    rotated = settings(tmp_path, MODAL_WORKSPACE_MCP_TOKEN="token-two-abc").channel_secret
    assert by_token and rotated and by_token != rotated
    configured = "c" * 40
    kept = [
        settings(
            tmp_path, MODAL_WORKSPACE_MCP_TOKEN=token, MODAL_WORKSPACE_CHANNEL_SECRET=configured
        ).channel_secret
        for token in ("token-one-abc", "token-two-abc")
    ]
    assert kept[0] == kept[1] and configured.encode() not in (kept[0] or b"")


def test_a_short_channel_secret_is_refused_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="MODAL_WORKSPACE_CHANNEL_SECRET"):
        settings(tmp_path, MODAL_WORKSPACE_CHANNEL_SECRET="short")


def test_each_workspace_has_its_own_key() -> None:
    secret = b"s" * 32
    first, second = channel_key(secret, "ws-" + "1" * 32), channel_key(secret, "ws-" + "2" * 32)
    assert first != second and len(first) == 64
    assert channel_key(b"t" * 32, "ws-" + "1" * 32) != first
