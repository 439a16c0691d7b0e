"""The GitHub settings as the gateway reads them at start: where git reaches GitHub and where its
API is, checked once (a bad one stops the start naming the variable, and never echoes a
credential), and whether workspaces may hold the GitHub secret."""

from __future__ import annotations

import pytest
from modal_workspace_core import policy
from modal_workspace_core.config import ConfigError, load_settings

URL = "MODAL_WORKSPACE_GITHUB_URL"
API = "MODAL_WORKSPACE_GITHUB_API_URL"
ALLOW = "MODAL_WORKSPACE_ALLOW_GITHUB_SECRET_IN_WORKSPACES"


def test_github_is_the_default_for_git_and_the_api() -> None:
    settings = load_settings({})
    assert settings.github_url == "https://github.com"
    assert settings.github_api_url == "https://api.github.com"
    assert settings.allow_github_secret_in_workspaces is False


def test_the_base_urls_are_kept_canonical() -> None:
    settings = load_settings(
        {URL: "HTTP://127.0.0.1:8080/", API: "https://ghe.example.org/api/v3/"}
    )
    assert settings.github_url == "http://127.0.0.1:8080"
    assert settings.github_api_url == "https://ghe.example.org/api/v3"


@pytest.mark.parametrize("name", [URL, API])
@pytest.mark.parametrize(
    "value", ["ssh://github.com", "https://github.com?x", "github.com", "https://a b"]
)
def test_a_bad_base_url_stops_the_start_naming_the_variable(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        load_settings({name: value})


def test_a_base_url_with_a_credential_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings({URL: "https://x-access-token:ghp_leaked@github.com"})
    assert "ghp_leaked" not in str(caught.value)


def test_repositories_are_rebuilt_onto_the_base() -> None:
    repo = policy.github_repo("https://github.com/octo/hello")
    assert repo.url == "https://github.com/octo/hello.git"
    assert repo.url_on("http://127.0.0.1:9/") == "http://127.0.0.1:9/octo/hello.git"
    # The input policy itself stays strict: another host is still refused as input.
    with pytest.raises(policy.PolicyError):
        policy.github_repo("http://127.0.0.1:9/octo/hello")


@pytest.mark.parametrize(("value", "allowed"), [("1", True), ("true", True), ("0", False)])
def test_the_github_secret_in_workspaces_is_an_explicit_switch(value: str, allowed: bool) -> None:
    assert load_settings({ALLOW: value}).allow_github_secret_in_workspaces is allowed


def test_a_bad_switch_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=ALLOW):
        load_settings({ALLOW: "maybe"})
