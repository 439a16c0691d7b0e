"""Fixtures shared by the test modules (servers and drivers that clean up after themselves)."""

import pytest
from support.fake_github import github_app
from support.git_server import git_server, hello_repo_template

__all__ = ["git_server", "github_app", "hello_repo_template"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "container_dirs(*paths): the container directories a control plane's sandboxes may write",
    )
