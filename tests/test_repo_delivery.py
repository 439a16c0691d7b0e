"""Delivering work through the public REST API on the local driver: commit, push a branch, open
a pull request, with per-operation GitHub App tokens from the fake GitHub (`support.fake_github`)
in front of a real smart-HTTP git server that takes only live tokens of the right repository."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from e2e_support import Served, backend_for, local_backend, serve
from service_support import TOKEN
from support.fake_github import OTHER_REPO, FakeGitHub
from support.git_server import HELLO_REPO, GitServer

pytest.importorskip("modal_workspace_core.drivers.local.driver")


@dataclass
class Rig:
    served: Served
    api: httpx2.Client
    github: FakeGitHub
    git: GitServer


@contextlib.contextmanager
def rigged(
    tmp_path: Path,
    github: FakeGitHub,
    git: GitServer,
    static_token: str,
    env: dict[str, str],
    driver: str = "local",
) -> Iterator[Rig]:
    with contextlib.ExitStack() as stack:
        if driver == "local-unisolated":  # the fallback without bubblewrap, paths and all
            backend = stack.enter_context(local_backend(tmp_path, static_token, isolation="none"))
        else:
            backend = stack.enter_context(backend_for(driver, tmp_path, static_token))
        served = stack.enter_context(serve(tmp_path, static_token, backend, github_env=env))
        headers = {"Authorization": f"Bearer {TOKEN}"}
        api = stack.enter_context(httpx2.Client(base_url=served.api, headers=headers, timeout=120))
        yield Rig(served, api, github, git)


@pytest.fixture
def rig(tmp_path: Path, github_app: FakeGitHub, git_server: GitServer) -> Iterator[Rig]:
    # The secret's static token is one GitHub never accepts: every credential is the App's.
    with rigged(tmp_path, github_app, git_server, "ghp_never", github_app.gateway_env) as rig:
        yield rig


@pytest.fixture(params=["local", "local-unisolated", "modal"])
def any_rig(
    request: pytest.FixtureRequest, tmp_path: Path, github_app: FakeGitHub, git_server: GitServer
) -> Iterator[Rig]:
    """`rig` on every driver: the local one isolated and not, and Modal's (the control plane)."""
    env = github_app.gateway_env
    with rigged(tmp_path, github_app, git_server, "ghp_never", env, request.param) as rig:
        yield rig


def ok(response: httpx2.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def follow(rig: Rig, ws: str, exec_id: str) -> dict[str, Any]:
    cursor, page = 0, {}
    while True:
        page = ok(
            rig.api.get(
                f"/workspaces/{ws}/streams/{exec_id}/events",
                params={"cursor": cursor, "wait_seconds": 10},
            )
        )
        cursor = page["next_cursor"]
        if page["done"]:
            return page


def sh(rig: Rig, ws: str, command: str) -> dict[str, Any]:
    done = ok(rig.api.post(f"/workspaces/{ws}/exec", json={"command": command}))
    assert done["returncode"] == 0, done
    return done


def cloned(rig: Rig) -> str:
    ws = ok(rig.api.post("/workspaces", json={}))["workspace_id"]
    clone = ok(
        rig.api.post(
            f"/workspaces/{ws}/repo/clone",
            json={"repository": HELLO_REPO, "use_github_token": True},
        )
    )
    assert follow(rig, ws, clone["exec_id"])["returncode"] == 0
    # No wait for the clone's record: the operations that default to the cloned repository
    # wait for the record of a clone that has just ended.
    return ws


def remote_sha(rig: Rig, slug: str, branch: str) -> str | None:
    bare = rig.git.root / f"{slug}.git"
    found = subprocess.run(
        ["git", "--git-dir", str(bare), "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() or None


def commit(rig: Rig, ws: str, **body: Any) -> httpx2.Response:
    return rig.api.post(f"/workspaces/{ws}/repo/commit", json=body)


def push(rig: Rig, ws: str, **body: Any) -> dict[str, Any]:
    return ok(rig.api.post(f"/workspaces/{ws}/repo/push", json=body))


def test_clone_commit_push_and_a_draft_pull_request_opened_once(any_rig: Rig) -> None:
    rig = any_rig
    ws = cloned(rig)
    refused = commit(rig, ws, message="nothing yet")
    assert refused.status_code == 409 and "nothing to commit" in refused.text, refused.text

    sh(rig, ws, "cd hello && echo 'print(42)' > answer.py && rm README.md")
    made = ok(
        commit(rig, ws, message="Answer the question", author_name="Ada", author_email="a@x.io")
    )
    assert made["branch"] == "main" and len(made["commit"]) == 40
    assert sorted(f["path"] for f in made["files"]) == ["README.md", "answer.py"]
    author = sh(rig, ws, "git -C hello log -1 --format='%an <%ae> %s'")["stdout"]
    assert author.strip() == "Ada <a@x.io> Answer the question"

    pushed = push(rig, ws)
    branch = f"agent/{ws}/main"
    assert pushed["state"] == "finished" and pushed["pushed"], pushed
    assert (pushed["remote_branch"], pushed["created"], pushed["forced"]) == (branch, True, False)
    assert pushed["commit"] == made["commit"] == remote_sha(rig, HELLO_REPO, branch)
    assert pushed["commit_count"] == 1
    assert [c["subject"] for c in pushed["commits"]] == ["Answer the question"]
    assert sorted(pushed["files"]) == ["README.md", "answer.py"] and pushed["file_count"] == 2
    # The token was minted for this push, this repository and contents: write alone.
    push_token = rig.github.minted[-1]
    assert push_token.repositories == (HELLO_REPO,)
    assert push_token.permissions.get("contents") == "write"
    assert "pull_requests" not in push_token.permissions

    opened = ok(
        rig.api.post(
            f"/workspaces/{ws}/repo/pull-request", json={"title": "Answer", "body": "Adds it."}
        )
    )
    assert opened["created"] and opened["draft"] and opened["head"] == branch
    assert opened["base"] == "main" and opened["url"].endswith(
        f"/octo/hello/pull/{opened['number']}"
    )
    again = ok(rig.api.post(f"/workspaces/{ws}/repo/pull-request", json={"title": "Answer"}))
    assert (again["number"], again["created"]) == (opened["number"], False)
    assert len(rig.github.pulls) == 1
    pr_token = rig.github.minted[-1]
    assert pr_token.repositories == (HELLO_REPO,) and "contents" not in pr_token.permissions


def test_every_operation_mints_again_so_an_expired_token_never_fails_a_push(rig: Rig) -> None:
    ws = cloned(rig)
    sh(rig, ws, "cd hello && echo one > one.txt")
    ok(commit(rig, ws, message="one"))
    first = push(rig, ws)
    assert first["pushed"] and first["created"]
    minted = len(rig.github.minted)
    rig.github.expire_all()  # an hour passes: every token so far is dead
    sh(rig, ws, "cd hello && echo two > two.txt")
    ok(commit(rig, ws, message="two"))
    second = push(rig, ws)
    assert second["pushed"] and not second["created"], second
    assert second["previous"] == first["commit"] and second["commit_count"] == 1
    assert len(rig.github.minted) == minted + 1 and rig.github.minted[-1].live


def test_a_token_of_one_repository_is_refused_by_another(rig: Rig, tmp_path: Path) -> None:
    ws = cloned(rig)
    sh(rig, ws, "cd hello && echo x > x.txt")
    ok(commit(rig, ws, message="x"))
    assert push(rig, ws)["pushed"]
    token = rig.github.minted[-1]
    assert token.live and token.repositories == (HELLO_REPO,)
    # The same live token, straight to the other repository: the server refuses it.
    work = tmp_path / "direct"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(work),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "try",
        ],
        check=True,
    )
    url = rig.git.repo_url(OTHER_REPO).replace("://", f"://x-access-token:{token.token}@")
    refused = subprocess.run(
        ["git", "-C", str(work), "push", url, "main:refs/heads/stolen"],
        capture_output=True,
        text=True,
        check=False,
        env={"GIT_TERMINAL_PROMPT": "0", "PATH": "/usr/bin:/bin"},
    )
    assert refused.returncode != 0
    assert remote_sha(rig, OTHER_REPO, "stolen") is None


def test_force_only_onto_the_workspaces_own_branch_and_only_with_a_lease(rig: Rig) -> None:
    ws = cloned(rig)
    sh(rig, ws, "cd hello && echo v1 > f.txt")
    ok(commit(rig, ws, message="v1"))
    assert push(rig, ws)["pushed"]
    sh(
        rig,
        ws,
        "cd hello && echo v2 > f.txt && git add f.txt && "
        "git -c user.name=t -c user.email=t@t commit -q --amend -m v2",
    )
    plain = push(rig, ws)
    assert not plain["pushed"] and "fetch and merge" in (plain["error"] or ""), plain
    forced = push(rig, ws, force=True)
    assert forced["pushed"] and forced["forced"], forced
    assert remote_sha(rig, HELLO_REPO, f"agent/{ws}/main") == forced["commit"]

    # Never onto a branch it did not create: refused before anything runs.
    onto_main = rig.api.post(
        f"/workspaces/{ws}/repo/push", json={"remote_branch": "main", "force": True}
    )
    assert onto_main.status_code == 403 and onto_main.json()["error"]["field"] == "force"
    # Someone else moves main: a plain push of this workspace's main onto it is then no
    # fast-forward, and main stays as they left it.
    bare = rig.git.root / f"{HELLO_REPO}.git"
    theirs = git_bare(bare, "commit-tree", "main^{tree}", "-p", "main", "-m", "theirs")
    git_bare(bare, "update-ref", "refs/heads/main", theirs)
    diverged = push(rig, ws, remote_branch="main")
    assert not diverged["pushed"] and "fetch and merge" in (diverged["error"] or ""), diverged
    assert remote_sha(rig, HELLO_REPO, "main") == theirs

    # The workspace's own branch moved by someone else since it pushed: force is refused by
    # its lease (the commit it pushed last), and the branch keeps their commit.
    own = f"refs/heads/agent/{ws}/main"
    git_bare(bare, "update-ref", own, theirs)
    sh(
        rig,
        ws,
        "cd hello && echo v3 > f.txt && git add f.txt && "
        "git -c user.name=t -c user.email=t@t commit -q --amend -m v3",
    )
    stale = push(rig, ws, force=True)
    assert not stale["pushed"] and "changed since" in (stale["error"] or ""), stale
    assert remote_sha(rig, HELLO_REPO, f"agent/{ws}/main") == theirs


def git_bare(bare: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    done = subprocess.run(
        ["git", f"--git-dir={bare}", *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_without_an_app_the_allowlisted_secrets_token_pushes_and_opens(
    tmp_path: Path, github_app: FakeGitHub, git_server: GitServer
) -> None:
    static = "ghp_" + "s3cr3t" * 6
    github_app.static_token = static
    env = {k: v for k, v in github_app.gateway_env.items() if "GITHUB_APP" not in k}
    with rigged(tmp_path, github_app, git_server, static, env) as rig:
        ws = cloned(rig)
        sh(rig, ws, "cd hello && echo s > s.txt")
        ok(commit(rig, ws, message="static"))
        pushed = push(rig, ws, remote_branch="topic/static")
        assert pushed["pushed"] and pushed["created"], pushed
        opened = ok(
            rig.api.post(
                f"/workspaces/{ws}/repo/pull-request", json={"title": "Static", "draft": False}
            )
        )
        assert opened["head"] == "topic/static" and not opened["draft"]
    assert github_app.minted == []  # no App: nothing was minted
    assert static in git_server.passwords
