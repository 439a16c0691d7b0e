"""The command-line client's settings (config/client.py): the gateway's URL, held to https
except on loopback, and the token from a variable or a file, the flags winning; never a token
in a message."""

from __future__ import annotations

from pathlib import Path

import pytest
from modal_workspace_core.config import ConfigError, load_settings
from modal_workspace_core.config.client import is_loopback, read_client


def test_no_url_means_in_process() -> None:
    settings = load_settings({})
    assert settings.gateway_url is None and settings.client_token is None


def test_the_url_is_held_to_https_except_on_loopback() -> None:
    assert read_client({"MODAL_WORKSPACE_URL": "http://127.0.0.1:8000/"}).gateway_url == (
        "http://127.0.0.1:8000"
    )
    assert read_client({"MODAL_WORKSPACE_URL": "http://[::1]:8000"}).gateway_url
    assert read_client({}, url="https://gw.example.com/base/").gateway_url == (
        "https://gw.example.com/base"
    )
    with pytest.raises(ConfigError, match="MODAL_WORKSPACE_URL: plain http only to a loopback"):
        read_client({"MODAL_WORKSPACE_URL": "http://gw.example.com"})
    with pytest.raises(ConfigError, match="--url: no credentials"):
        read_client({}, url="https://user:secret-pass@gw.example.com")


def test_the_token_from_the_variable_else_its_file_and_the_flag_first(tmp_path: Path) -> None:
    by_file, by_flag = tmp_path / "f", tmp_path / "flag"
    by_file.write_text("\n  from-the-file-0001  \nignored-second-line\n")
    by_flag.write_text("from-the-flag-0001\n")
    env = {"MODAL_WORKSPACE_TOKEN_FILE": str(by_file)}
    assert read_client(env).client_token == "from-the-file-0001"
    assert read_client(env).client_token_file == by_file
    env["MODAL_WORKSPACE_TOKEN"] = "from-the-variable-1"
    assert read_client(env).client_token == "from-the-variable-1"
    assert read_client(env).client_token_file is None  # not read: the variable won
    assert read_client(env, token_file=by_flag).client_token == "from-the-flag-0001"


def test_a_bad_token_is_named_never_quoted(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as short:
        read_client({"MODAL_WORKSPACE_TOKEN": "abc"})
    assert "MODAL_WORKSPACE_TOKEN" in str(short.value) and "abc" not in str(short.value)
    empty = tmp_path / "empty"
    empty.write_text("\n\n")
    with pytest.raises(ConfigError, match="holds no token"):
        read_client({}, token_file=empty)
    with pytest.raises(ConfigError, match="--token-file: cannot read"):
        read_client({}, token_file=tmp_path / "missing")


def test_the_token_file_is_one_a_sandbox_must_not_see(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("a-client-token-0001\n")
    settings = load_settings({"MODAL_WORKSPACE_TOKEN_FILE": str(token)})
    assert token in settings.private_files
    assert "a-client-token-0001" not in repr(settings)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("localhost", True), ("127.0.0.2", True), ("[::1]", True), ("10.0.0.1", False),
     ("example.org", False)],
)  # fmt: skip
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
