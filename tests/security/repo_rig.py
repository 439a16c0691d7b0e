"""A real server on the local driver (isolated where bubblewrap works) whose GitHub is the fake
GitHub App in front of the test git server, and the few REST calls the repository security tests
make with it."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
from e2e_support import local_backend, serve
from service_support import TOKEN
from support.fake_github import FakeGitHub
from support.git_server import HELLO_REPO, GitServer


@contextlib.contextmanager
def repo_api(tmp_path: Path, github_app: FakeGitHub) -> Iterator[httpx2.Client]:
    with contextlib.ExitStack() as stack:
        backend = stack.enter_context(local_backend(tmp_path, "ghp_never"))
        served = stack.enter_context(
            serve(tmp_path, "ghp_never", backend, github_env=github_app.gateway_env)
        )
        headers = {"Authorization": f"Bearer {TOKEN}"}
        yield stack.enter_context(httpx2.Client(base_url=served.api, headers=headers, timeout=300))


def ok(response: httpx2.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def follow(api: httpx2.Client, ws: str, exec_id: str) -> dict[str, Any]:
    cursor = 0
    while True:
        page = ok(
            api.get(
                f"/workspaces/{ws}/streams/{exec_id}/events",
                params={"cursor": cursor, "wait_seconds": 10},
            )
        )
        cursor = page["next_cursor"]
        if page["done"]:
            return dict(page)


def sh(api: httpx2.Client, ws: str, command: str) -> str:
    done = ok(api.post(f"/workspaces/{ws}/exec", json={"command": command}))
    assert done["returncode"] == 0, done
    return str(done["stdout"])


def remote_sha(git: GitServer, branch: str) -> str | None:
    """The commit the test server's branch points at; None when it has no such branch."""
    bare = git.root / f"{HELLO_REPO}.git"
    argv = ["git", "--git-dir", str(bare), "rev-parse", "--verify", "--quiet"]
    done = subprocess.run([*argv, f"refs/heads/{branch}"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None
