"""The git smart-HTTP test server: real `git` clones and pushes over it, with basic auth.

The token reaches git only through `GIT_ASKPASS` (never a URL or an argv), and the server
records what it was sent so the tests can prove the token arrived.
"""

from __future__ import annotations

import os
import stat
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support.git_server import HELLO_REPO, ArgvSampler, GitServer

ASKPASS = """#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' "$TEST_GIT_USERNAME" ;;
  *) printf '%s\\n' "$TEST_GIT_PASSWORD" ;;
esac
"""


def git_env(tmp_path: Path, server: GitServer, password: str) -> dict[str, str]:
    """An environment with no git configuration in which askpass answers."""
    askpass = tmp_path / "askpass.sh"
    askpass.write_text(ASKPASS)
    askpass.chmod(askpass.stat().st_mode | stat.S_IXUSR)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": str(askpass),
        "TEST_GIT_USERNAME": server.username,
        "TEST_GIT_PASSWORD": password,
        "GIT_AUTHOR_NAME": "Tester",
        "GIT_AUTHOR_EMAIL": "tester@example.com",
        "GIT_COMMITTER_NAME": "Tester",
        "GIT_COMMITTER_EMAIL": "tester@example.com",
    }


def git(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_clone_with_the_right_token_through_askpass(git_server: GitServer, tmp_path: Path) -> None:
    env = git_env(tmp_path, git_server, git_server.token)
    dest = tmp_path / "hello"
    argv = ["clone", "--progress", git_server.repo_url(HELLO_REPO), str(dest)]
    assert all(git_server.token not in arg for arg in argv)
    with ArgvSampler(git_server.token) as sampler:
        done = git(env, *argv)
    assert done.returncode == 0, done.stderr
    assert (dest / "README.md").read_text() == "# hello\n"
    branches = git(env, "branch", "--remotes", "--format=%(refname:short)", cwd=dest).stdout
    assert set(branches.split()) >= {"origin/main", "origin/feature", "origin/release/1.0"}
    # The token reached the server, as the password of a basic credential...
    assert git_server.token in git_server.passwords
    assert any(r.status == 200 and r.authorization for r in git_server.requests)
    # ...and was never in any process's argv while git ran.
    assert sampler.samples > 0 and sampler.git_seen > 0
    assert sampler.leaks == []


def test_ls_remote_lists_every_branch(git_server: GitServer, tmp_path: Path) -> None:
    env = git_env(tmp_path, git_server, git_server.token)
    done = git(env, "ls-remote", git_server.repo_url(HELLO_REPO))
    assert done.returncode == 0, done.stderr
    refs = {line.split("\t")[1] for line in done.stdout.splitlines()}
    assert {"HEAD", "refs/heads/main", "refs/heads/feature", "refs/heads/release/1.0"} <= refs


def test_a_wrong_token_is_refused_with_401(git_server: GitServer, tmp_path: Path) -> None:
    env = git_env(tmp_path, git_server, "ghp_wrong")
    done = git(env, "clone", git_server.repo_url(HELLO_REPO), str(tmp_path / "no"))
    assert done.returncode != 0
    assert "Authentication failed" in done.stderr or "401" in done.stderr
    assert not (tmp_path / "no").exists()
    assert "ghp_wrong" in git_server.passwords
    assert all(r.status == 401 for r in git_server.requests)


def test_requests_without_credentials_get_a_basic_challenge(git_server: GitServer) -> None:
    url = f"{git_server.repo_url(HELLO_REPO)}/info/refs?service=git-upload-pack"
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(url, timeout=30)
    assert caught.value.code == 401
    assert caught.value.headers["WWW-Authenticate"].startswith("Basic ")
    wrong = urllib.request.Request(url, headers={"Authorization": "Basic eDp5"})  # x:y
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(wrong, timeout=30)
    assert caught.value.code == 401
    assert git_server.authorizations == ["Basic eDp5"]


def test_push_of_a_new_branch_reaches_the_bare_repository(
    git_server: GitServer, tmp_path: Path
) -> None:
    env = git_env(tmp_path, git_server, git_server.token)
    dest = tmp_path / "hello"
    assert git(env, "clone", git_server.repo_url(HELLO_REPO), str(dest)).returncode == 0
    (dest / "NEW.md").write_text("pushed\n")
    assert git(env, "switch", "--quiet", "-c", "topic", cwd=dest).returncode == 0
    assert git(env, "add", "NEW.md", cwd=dest).returncode == 0
    assert git(env, "commit", "--quiet", "-m", "Add NEW.md", cwd=dest).returncode == 0
    pushed = git(env, "push", "--quiet", "origin", "topic", cwd=dest)
    assert pushed.returncode == 0, pushed.stderr
    bare = git_server.root / f"{HELLO_REPO}.git"
    shown = git(env, f"--git-dir={bare}", "show", "topic:NEW.md")
    assert shown.stdout == "pushed\n"
