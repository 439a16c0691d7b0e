"""A push's and a pull request's tokens are held by no process but the gateway and the agent:
absent from every process's argv and environment while they run (the askpass child prints the
token to git and holds it in neither), from the workspace's `.git/config`, from the events, the
gateway's log and every file under the data root, a snapshot taken right after included.

The fake GitHub App mints the tokens (`support.fake_github`); a test tells it the next ones, so
the samplers can look for them before they exist."""

from __future__ import annotations

import contextlib
import os
import secrets
import string
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from e2e_support import Served, local_backend, serve
from service_support import TOKEN
from support.fake_github import FakeGitHub
from support.git_server import HELLO_REPO, ArgvSampler, GitServer, start_ticks

pytest.importorskip("modal_workspace_core.drivers.local.driver")


def token_of(length: int) -> str:
    alphabet = string.ascii_letters + string.digits + "_"
    return "ghs_" + "".join(secrets.choice(alphabet) for _ in range(length - 4))


@pytest.fixture
def served(tmp_path: Path, github_app: FakeGitHub) -> Iterator[tuple[Served, httpx2.Client]]:
    with contextlib.ExitStack() as stack:
        backend = stack.enter_context(local_backend(tmp_path, "unused-static-token"))
        served = stack.enter_context(
            serve(tmp_path, "unused-static-token", backend, github_env=github_app.gateway_env)
        )
        headers = {"Authorization": f"Bearer {TOKEN}"}
        api = stack.enter_context(httpx2.Client(base_url=served.api, headers=headers, timeout=120))
        yield served, api


def ok(response: httpx2.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def events_text(api: httpx2.Client, ws: str, exec_id: str) -> str:
    cursor, text = 0, ""
    while True:
        page = ok(
            api.get(
                f"/workspaces/{ws}/streams/{exec_id}/events",
                params={"cursor": cursor, "wait_seconds": 10},
            )
        )
        text += str(page["events"])
        cursor = page["next_cursor"]
        if page["done"]:
            return text


def files_holding(root: Path, needle: bytes) -> list[str]:
    """Every file under `root` that holds `needle`. A workspace's disk image (`disk.img`, a
    sparse file of gigabytes) is read through its mount, which is under `root` too."""
    found = []
    for path in root.rglob("*"):
        with contextlib.suppress(OSError):
            if path.name == "disk.img" or not path.is_file() or path.is_symlink():
                continue
            if needle in path.read_bytes():
                found.append(str(path.relative_to(root)))
    return found


def test_push_and_pull_request_tokens_reach_no_argv_environment_file_or_event(
    served: tuple[Served, httpx2.Client], github_app: FakeGitHub, git_server: GitServer
) -> None:
    server, api = served
    # Lengths GitHub's old format never had: redaction must not assume 40 characters.
    clone_token, push_token, pull_token = token_of(97), token_of(40), token_of(123)
    github_app.next_tokens = [clone_token, push_token, pull_token]

    ws = ok(api.post("/workspaces", json={}))["workspace_id"]
    clone = ok(
        api.post(
            f"/workspaces/{ws}/repo/clone",
            json={"repository": HELLO_REPO, "use_github_token": True},
        )
    )
    clone_events = events_text(api, ws, clone["exec_id"])
    deadline = time.monotonic() + 30
    while "repo-path" not in ok(api.get(f"/workspaces/{ws}"))["tags"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    done = ok(api.post(f"/workspaces/{ws}/exec", json={"command": "cd hello && echo hi > hi.txt"}))
    assert done["returncode"] == 0
    ok(api.post(f"/workspaces/{ws}/repo/commit", json={"message": "hi"}))

    with ArgvSampler(push_token, environ=True, also=(pull_token,)) as sampler:
        pushed = ok(api.post(f"/workspaces/{ws}/repo/push", json={}))
        pull = ok(api.post(f"/workspaces/{ws}/repo/pull-request", json={"title": "hi"}))
    assert pushed["pushed"] and pull["created"], (pushed, pull)
    # The tokens really were the ones used, and the samplers really watched git run.
    assert [m.token for m in github_app.minted] == [clone_token, push_token, pull_token]
    assert any(p == push_token for p in git_server.passwords)
    assert sampler.git_seen > 0 and sampler.samples > 10
    assert sampler.leaks == []
    if os.geteuid() == 0:
        # As root it read every environment the gateway's work gave rise to (a process of the
        # host's older than the gateway may be shielded even from root), the push step's among
        # them while it held the token.
        started = start_ticks(Path(f"/proc/{server.pid}"))
        assert started is not None
        assert sampler.unreadable_since(started) == [], sampler.unreadable
        assert sampler.askpass_environs > 0, vars(sampler)

    push_events = events_text(api, ws, pushed["exec_id"])
    snapshot = ok(api.post(f"/workspaces/{ws}/snapshots", json={"label": "after-push"}))
    assert snapshot["state"] == "ready", snapshot
    log = server.log.read_bytes()
    for token in (clone_token, push_token, pull_token):
        needle = token.encode()
        assert token not in clone_events + push_events + str(pushed) + str(pull)
        assert needle not in log
        # The workspace's files (.git/config among them), the agent's records and mirrors, and
        # the snapshot's copy of all of them.
        assert files_holding(server.data_root, needle) == []
    configs = [p for p in server.data_root.rglob("config") if p.parent.name == ".git"]
    assert configs, "the clone's .git/config is under the data root"
    # The scan does reach the workspace's files: a token written there is found.
    planted = api.put(
        f"/workspaces/{ws}/files/content", json={"path": "hello/planted.txt", "content": push_token}
    )
    assert planted.status_code == 200, planted.text
    assert any(
        p.endswith("hello/planted.txt")
        for p in files_holding(server.data_root, push_token.encode())
    )
