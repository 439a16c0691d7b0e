"""Fixtures shared by the test modules (servers and drivers that clean up after themselves)."""

from support.fake_github import github_app
from support.git_server import git_server, hello_repo_template

__all__ = ["git_server", "github_app", "hello_repo_template"]
