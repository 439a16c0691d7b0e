"""A gateway on the Modal driver without Modal credentials refuses to start, in one line that says
what to do; the Python API fails the same way when it opens. Credentials are looked for where the
SDK looks (its variables, the active profile of its config file), without a network call, and
never inside a Modal container, which has its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import modal
import modal.config
import pytest
from modal_workspace_core.drivers.modal.credentials import require_credentials
from modal_workspace_core.errors import UpstreamError
from modal_workspace_core.surfaces.python_client import Workspaces
from service_support import TOKEN, free_port

# `modal-workspace` as this interpreter runs it (the console script's own interpreter may be
# another checkout's).
COMMAND = [sys.executable, "-m", "modal_workspace_core.surfaces.cli"]
# Every variable the SDK takes credentials from.
CREDENTIALS = (
    "MODAL_TOKEN_ID",
    "MODAL_TOKEN_SECRET",
    "MODAL_OAUTH_REFRESH_TOKEN",
    "MODAL_OAUTH_CLIENT_ID",
    "MODAL_OAUTH_CLIENT_SECRET",
    "MODAL_OAUTH_JWT_KEY",
)


def bare_environment(tmp_path: Path, **env: str) -> dict[str, str]:
    """This process's environment with nothing of Modal's or the gateway's, and the SDK's
    config file pointed at one that does not exist: a machine nobody logged into Modal on."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    return {**base, "MODAL_CONFIG_PATH": str(tmp_path / "no-modal.toml"), **env}


def check_in_a_fresh_process(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`require_credentials()` in a process of its own, so that the SDK reads its config file
    as it does at start."""
    code = (
        "from modal_workspace_core.drivers.modal.credentials import require_credentials\n"
        "require_credentials()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


def test_serve_on_the_modal_driver_without_credentials_refuses_in_one_line(
    tmp_path: Path,
) -> None:
    env = bare_environment(tmp_path, MODAL_WORKSPACE_MCP_TOKEN=TOKEN)
    done = subprocess.run(
        [*COMMAND, "serve", "--driver", "modal", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("modal-workspace: cannot start the modal driver: no Modal token")
    assert "`modal token new`" in line and "MODAL_TOKEN_ID and MODAL_TOKEN_SECRET" in line
    assert str(tmp_path / "no-modal.toml") in line


def test_a_token_in_the_environment_or_in_the_active_profile_is_enough(tmp_path: Path) -> None:
    in_env = bare_environment(tmp_path, MODAL_TOKEN_ID="ak-test", MODAL_TOKEN_SECRET="as-test")
    assert check_in_a_fresh_process(in_env).returncode == 0
    profile = tmp_path / "modal.toml"
    profile.write_text('[work]\ntoken_id = "ak-test"\ntoken_secret = "as-test"\nactive = true\n')
    in_profile = bare_environment(tmp_path, MODAL_CONFIG_PATH=str(profile))
    assert check_in_a_fresh_process(in_profile).returncode == 0
    # Another profile named in MODAL_PROFILE holds none: the SDK would have none either.
    elsewhere = check_in_a_fresh_process({**in_profile, "MODAL_PROFILE": "other"})
    assert elsewhere.returncode != 0
    assert f"no Modal token in the environment or in profile 'other' of {profile}" in (
        elsewhere.stderr
    )


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ({"MODAL_TOKEN_ID": "ak-test"}, "no Modal token"),
        (
            {"MODAL_TOKEN_ID": "ak-test", "MODAL_TOKEN_SECRET": "as-test",
             "MODAL_OAUTH_REFRESH_TOKEN": "r"},
            "both a Modal token and Modal OAuth credentials",
        ),
        ({"MODAL_OAUTH_REFRESH_TOKEN": "r", "MODAL_OAUTH_CLIENT_ID": "c"},
         "OAuth credentials are incomplete"),
    ],
)  # fmt: skip
def test_credentials_the_sdk_would_refuse_are_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, given: dict[str, str], problem: str
) -> None:
    for name in CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(modal.config, "_user_config", {})
    for name, value in given.items():
        monkeypatch.setenv(name, value)

    with pytest.raises(UpstreamError, match=problem) as refused:
        require_credentials()
    assert "`modal token new`" in refused.value.message


def test_oauth_credentials_complete_as_the_sdk_takes_them_are_enough(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(modal.config, "_user_config", {})
    for name in ("MODAL_OAUTH_REFRESH_TOKEN", "MODAL_OAUTH_CLIENT_ID", "MODAL_OAUTH_JWT_KEY"):
        monkeypatch.setenv(name, "value")

    require_credentials()


def test_inside_a_modal_container_nothing_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(modal.config, "_user_config", {})
    with pytest.raises(UpstreamError):
        require_credentials()

    # The deployed gateway runs in a Modal Function's container, which has credentials of its
    # own; so does any process the SDK treats as remote.
    with monkeypatch.context() as inside:
        inside.setattr(modal, "is_local", lambda: False)
        require_credentials()
    with monkeypatch.context() as remote:
        remote.setenv("MODAL_IS_REMOTE", "1")
        require_credentials()


async def test_the_python_api_fails_the_same_way_when_it_opens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in CREDENTIALS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(modal.config, "_user_config", {})
    monkeypatch.setenv("MODAL_WORKSPACE_DATA_ROOT", str(tmp_path))
    workspaces = Workspaces("modal")

    with pytest.raises(UpstreamError, match="no Modal token") as refused:
        async with workspaces:
            pytest.fail("opened without credentials")
    assert "`modal token new`" in refused.value.message
