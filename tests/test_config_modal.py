"""The Modal driver's section of the settings: the default idle timeout of new workspaces."""

from __future__ import annotations

from pathlib import Path

import pytest
from modal_workspace_core.config import ConfigError, load_settings
from modal_workspace_core.config.modal import DEFAULT_IDLE_TIMEOUT_ENV, ModalSettings


def modal_settings(tmp_path: Path, **env: str) -> ModalSettings:
    settings = load_settings(
        {"MODAL_WORKSPACE_DRIVER": "modal", "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path), **env}
    )
    assert settings.modal is not None
    return settings.modal


def test_new_workspaces_idle_out_after_fifteen_minutes_unless_told_otherwise(
    tmp_path: Path,
) -> None:
    assert modal_settings(tmp_path).default_idle_timeout_seconds == 900
    given = modal_settings(tmp_path, **{DEFAULT_IDLE_TIMEOUT_ENV: "3600"})
    assert given.default_idle_timeout_seconds == 3600
    assert (
        modal_settings(tmp_path, **{DEFAULT_IDLE_TIMEOUT_ENV: "0"}).default_idle_timeout_seconds
        is None
    )


@pytest.mark.parametrize("value", ["4", "86401", "-1", "15m", "1.5", "²"])
def test_a_default_idle_timeout_out_of_bounds_is_refused_naming_the_setting(
    tmp_path: Path, value: str
) -> None:
    with pytest.raises(ConfigError, match=DEFAULT_IDLE_TIMEOUT_ENV) as refused:
        modal_settings(tmp_path, **{DEFAULT_IDLE_TIMEOUT_ENV: value})
    assert "0 (no idle timeout) or seconds from 5 to 86400" in str(refused.value)
