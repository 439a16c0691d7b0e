"""The allowlist settings as the gateway reads them at start: secret names with the variables
they hold (`openai:OPENAI_API_KEY`), volume names, GPU types with the most of each, and a bad
entry stopping the start with a message that names the variable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from modal_workspace_core.config import ConfigError, load_settings

SECRETS = "MODAL_WORKSPACE_ALLOWED_SECRETS"
VOLUMES = "MODAL_WORKSPACE_ALLOWED_VOLUMES"
GPUS = "MODAL_WORKSPACE_ALLOWED_GPUS"


def test_secret_names_and_their_listed_variables_are_read_once() -> None:
    settings = load_settings(
        {SECRETS: "openai:OPENAI_API_KEY:OPENAI_ORG_ID, github:GH_TOKEN ,db", VOLUMES: "cache"}
    )

    assert settings.allowed_secrets == ("openai", "github", "db")
    assert settings.secret_keys == {
        "openai": ("OPENAI_API_KEY", "OPENAI_ORG_ID"),
        "github": ("GH_TOKEN",),
    }
    assert settings.allowed_volumes == ("cache",)


def test_the_modal_driver_holds_the_same_allowlists_read_once() -> None:
    settings = load_settings(
        {SECRETS: "openai:OPENAI_API_KEY,github", VOLUMES: "a,b"}, driver="modal"
    )
    modal = settings.modal
    assert modal is not None

    assert modal.allowed_secrets == settings.allowed_secrets == ("openai", "github")
    assert modal.secret_keys == {"openai": ("OPENAI_API_KEY",)}
    assert modal.allowed_volumes == ("a", "b")


@pytest.mark.parametrize(
    ("variable", "value", "rule_text"),
    [
        (SECRETS, "openai:OPENAI-KEY", "environment variable name"),
        (SECRETS, "openai:", "environment variable name"),
        (SECRETS, "open ai", "Modal object name"),
        (SECRETS, "openai,openai:KEY", "listed twice"),
        (VOLUMES, "cache:KEY", "names only"),
        (GPUS, "T4,V100", "Modal's types"),
        (GPUS, "A10:8", "from 1 to 4 for A10"),
        (GPUS, "H100:2,h100", "listed twice"),
    ],
)
def test_a_bad_allowlist_entry_stops_the_start_naming_the_variable(
    variable: str, value: str, rule_text: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings({variable: value})
    assert str(refused.value).startswith(f"{variable}: entry '")
    assert rule_text in str(refused.value)

    # The Modal driver's section is read from the same parse: it stops the start the same way.
    with pytest.raises(ConfigError, match=f"^{variable}: entry '"):
        load_settings({variable: value}, driver="modal")


def test_gpu_types_are_read_canonical_and_none_by_default() -> None:
    assert load_settings({}).allowed_gpus == ()
    settings = load_settings({GPUS: " t4, H100:2 ,a100-80gb:1,"}, driver="modal")

    assert settings.allowed_gpus == ("T4", "H100:2", "A100-80GB:1")
    assert settings.modal is not None and settings.modal.allowed_gpus == settings.allowed_gpus


def test_local_secret_values_must_hold_the_variables_listed_for_them(tmp_path: Path) -> None:
    values = tmp_path / "secrets.json"
    values.write_text(json.dumps({"openai": {"OPENAI_API_KEY": "sk-local"}}))
    env = {"MODAL_WORKSPACE_LOCAL_SECRETS_FILE": str(values)}

    ok = load_settings({**env, SECRETS: "openai:OPENAI_API_KEY"})
    assert ok.secret_values["openai"] == {"OPENAI_API_KEY": "sk-local"}

    with pytest.raises(ConfigError) as refused:
        load_settings({**env, SECRETS: "openai:OPENAI_API_KEY:OPENAI_ORG_ID"})
    message = str(refused.value)
    assert "OPENAI_ORG_ID" in message and SECRETS in message
    assert "sk-local" not in message


def test_the_state_volume_on_the_volume_allowlist_stops_the_start() -> None:
    with pytest.raises(ConfigError, match="MODAL_WORKSPACE_STATE_VOLUME"):
        load_settings({VOLUMES: "cache,modal-workspace-state"}, driver="modal")
    named = {VOLUMES: "cache,mine", "MODAL_WORKSPACE_STATE_VOLUME": "mine"}
    with pytest.raises(ConfigError, match="must not be in"):
        load_settings(named, driver="modal")
    modal = load_settings({VOLUMES: "cache"}, driver="modal").modal
    assert modal is not None and modal.state_volume == "modal-workspace-state"


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf", "soon"])
def test_a_channel_idle_time_that_is_not_a_positive_number_stops_the_start(value: str) -> None:
    with pytest.raises(ConfigError, match="positive number of seconds"):
        load_settings({"MODAL_WORKSPACE_CHANNEL_IDLE_SECONDS": value}, driver="modal")
