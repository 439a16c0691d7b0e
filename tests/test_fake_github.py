"""The fake GitHub App API, driven the way the product drives it: githubkit for the REST calls
(its models parse every answer) and real `git` pushing and fetching with the minted tokens.

Each githubkit client gets its own cache: githubkit keeps an App's JWT in a process-wide cache
keyed by the App id alone, so a client with a wrong key would otherwise reuse a good JWT.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from githubkit import AppAuthStrategy, GitHub, TokenAuthStrategy
from githubkit.cache import MemCacheStrategy
from githubkit.exception import RequestFailed
from githubkit_schemas.latest.models import AppPermissions, InstallationToken, PullRequest
from modal_workspace_core.config import load_settings
from service_support import TOKEN
from support.fake_github import DEFAULT_INSTALLATION_ID, OTHER_REPO, FakeGitHub
from support.git_server import HELLO_REPO, GitServer
from test_git_server import git, git_env


def app_client(app: FakeGitHub, private_key: str | None = None) -> GitHub[Any]:
    auth = AppAuthStrategy(app.app_id, private_key or app.private_key_pem)
    return GitHub(auth, base_url=app.api_url, cache_strategy=MemCacheStrategy())


def token_client(app: FakeGitHub, token: str) -> GitHub[Any]:
    auth = TokenAuthStrategy(token)
    return GitHub(auth, base_url=app.api_url, cache_strategy=MemCacheStrategy())


async def mint(app: FakeGitHub, repo: str, permissions: dict[str, str]) -> InstallationToken:
    """A token for one repository of `octo`, as the product will mint it."""
    async with app_client(app) as gh:
        found = await gh.rest.apps.async_get_repo_installation("octo", repo)
        data = {"repositories": [repo], "permissions": permissions}
        minted = await gh.rest.apps.async_create_installation_access_token(
            found.parsed_data.id, data=data
        )
    assert minted.status_code == 201
    token: InstallationToken = minted.parsed_data
    return token


def clone(
    tmp_path: Path, server: GitServer, token: str, slug: str
) -> subprocess.CompletedProcess[str]:
    env = git_env(tmp_path, server, token)
    return git(env, "clone", "--quiet", server.repo_url(slug), str(tmp_path / slug))


def commit_branch(tmp_path: Path, server: GitServer, token: str, slug: str, branch: str) -> Path:
    """A clone of `slug` with one new commit on a new `branch` (not pushed)."""
    env = git_env(tmp_path, server, token)
    dest = tmp_path / slug
    if not dest.exists():
        done = git(env, "clone", "--quiet", server.repo_url(slug), str(dest))
        assert done.returncode == 0, done.stderr
    (dest / "NEW.md").write_text(f"{branch}\n")
    for args in (("switch", "--quiet", "-c", branch), ("add", "NEW.md"), ("commit", "-qm", branch)):
        assert git(env, *args, cwd=dest).returncode == 0
    return dest


def push(
    tmp_path: Path, server: GitServer, token: str, dest: Path, branch: str
) -> subprocess.CompletedProcess[str]:
    return git(git_env(tmp_path, server, token), "push", "--quiet", "origin", branch, cwd=dest)


def bare_branch(server: GitServer, slug: str, branch: str) -> str | None:
    done = subprocess.run(
        ["git", "--git-dir", str(server.root / f"{slug}.git"), "rev-parse", "--verify", "--quiet",
         f"refs/heads/{branch}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.strip() if done.returncode == 0 else None


# -- installation tokens ------------------------------------------------------------------------


async def test_an_installation_token_is_minted_for_one_repository(github_app: FakeGitHub) -> None:
    async with app_client(github_app) as gh:
        found = await gh.rest.apps.async_get_repo_installation("octo", "hello")
    installation = found.parsed_data
    assert installation.app_id == github_app.app_id and installation.target_type == "Organization"
    minted = await mint(github_app, "hello", {"contents": "write"})
    assert minted.token.startswith("ghs_")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", minted.expires_at)
    assert isinstance(minted.permissions, AppPermissions)
    assert minted.permissions.contents == "write"
    assert minted.repository_selection == "selected"
    assert [r.full_name for r in minted.repositories or []] == [HELLO_REPO]
    [recorded] = github_app.minted
    assert recorded.token == minted.token and recorded.repositories == (HELLO_REPO,)
    assert recorded.permissions == {"metadata": "read", "contents": "write"}
    # Every call carried the App's JWT, never a token.
    seen = [(r.path, (r.authorization or "").split(" ")[0]) for r in github_app.requests]
    assert seen == [
        ("/repos/octo/hello/installation", "Bearer"),
        ("/repos/octo/hello/installation", "Bearer"),
        ("/app/installations/4242/access_tokens", "Bearer"),
    ]


async def test_tokens_vary_in_length(github_app: FakeGitHub) -> None:
    tokens = [(await mint(github_app, "hello", {"contents": "read"})).token for _ in range(12)]
    assert len(set(tokens)) == 12
    assert all(re.fullmatch(r"ghs_[A-Za-z0-9_]{36,116}", t) for t in tokens)
    assert len({len(t) for t in tokens}) > 1


async def test_a_jwt_signed_with_another_key_is_refused(github_app: FakeGitHub) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = other.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    async with app_client(github_app, pem) as gh:
        with pytest.raises(RequestFailed) as caught:
            await gh.rest.apps.async_get_repo_installation("octo", "hello")
    assert caught.value.response.status_code == 401
    assert github_app.minted == []


@pytest.mark.parametrize(
    ("claims", "status"),
    [
        ({"iss": "APP", "iat": -60, "exp": 540}, 201),  # as githubkit signs it
        ({"iss": "APP-INT", "iat": -60, "exp": 540}, 201),  # `iss` as a number
        ({"iss": "999", "iat": -60, "exp": 540}, 401),  # another App
        ({"iss": "APP", "iat": -700, "exp": -100}, 401),  # expired
        ({"iss": "APP", "iat": 600, "exp": 1100}, 401),  # issued in the future
        ({"iss": "APP", "iat": -60, "exp": 3600}, 401),  # valid for longer than GitHub allows
    ],
)
def test_the_jwt_claims_are_checked(
    github_app: FakeGitHub, claims: dict[str, Any], status: int
) -> None:
    now = int(time.time())
    issuer = {"APP": str(github_app.app_id), "APP-INT": github_app.app_id}
    payload = {
        "iss": issuer.get(claims["iss"], claims["iss"]),
        "iat": now + claims["iat"],
        "exp": now + claims["exp"],
    }
    # Signed as raw JWS: PyJWT's encoder refuses a numeric `iss`, which other clients send.
    claims_json = json.dumps(payload).encode()
    signed = jwt.api_jws.encode(claims_json, github_app.private_key_pem, algorithm="RS256")
    url = f"{github_app.api_url}app/installations/{DEFAULT_INSTALLATION_ID}/access_tokens"
    headers = {"Authorization": f"Bearer {signed}"}
    answer = httpx2.post(url, json={"repositories": ["hello"]}, headers=headers, timeout=30)
    assert answer.status_code == status, answer.text
    assert len(github_app.minted) == (status == 201)


async def test_an_unknown_repository_has_no_installation(github_app: FakeGitHub) -> None:
    async with app_client(github_app) as gh:
        with pytest.raises(RequestFailed) as caught:
            await gh.rest.apps.async_get_repo_installation("octo", "missing")
    assert caught.value.response.status_code == 404


async def test_a_token_for_a_repository_outside_the_installation_is_refused(
    github_app: FakeGitHub,
) -> None:
    with pytest.raises(RequestFailed) as caught:
        await mint(github_app, "missing", {"contents": "write"})
    assert caught.value.response.status_code == 404  # no installation for it at all
    async with app_client(github_app) as gh:
        with pytest.raises(RequestFailed) as caught:
            data = {"repositories": ["missing"], "permissions": {"contents": "write"}}
            await gh.rest.apps.async_create_installation_access_token(
                DEFAULT_INSTALLATION_ID, data=data
            )
    assert caught.value.response.status_code == 422
    assert github_app.minted == []


# -- git with installation tokens ---------------------------------------------------------------


async def test_a_contents_write_token_pushes_a_new_branch_to_its_repository(
    github_app: FakeGitHub, git_server: GitServer, tmp_path: Path
) -> None:
    token = (await mint(github_app, "hello", {"contents": "write"})).token
    dest = commit_branch(tmp_path, git_server, token, HELLO_REPO, "topic")
    pushed = push(tmp_path, git_server, token, dest, "topic")
    assert pushed.returncode == 0, pushed.stderr
    assert bare_branch(git_server, HELLO_REPO, "topic") is not None
    assert token in git_server.passwords


async def test_a_large_push_arrives_whole(
    github_app: FakeGitHub, git_server: GitServer, tmp_path: Path
) -> None:
    # Bigger than git's 1 MiB post buffer: the pack is sent with chunked transfer encoding.
    token = (await mint(github_app, "hello", {"contents": "write"})).token
    dest = commit_branch(tmp_path, git_server, token, HELLO_REPO, "big")
    blob = os.urandom(3 * 1024 * 1024)
    (dest / "big.bin").write_bytes(blob)
    env = git_env(tmp_path, git_server, token)
    assert git(env, "add", "big.bin", cwd=dest).returncode == 0
    assert git(env, "commit", "-qm", "big", cwd=dest).returncode == 0
    pushed = push(tmp_path, git_server, token, dest, "big")
    assert pushed.returncode == 0, pushed.stderr
    shown = subprocess.run(
        ["git", "--git-dir", str(git_server.root / f"{HELLO_REPO}.git"), "show", "big:big.bin"],
        capture_output=True, check=True,
    )  # fmt: skip
    assert shown.stdout == blob


async def test_a_token_is_refused_on_another_repository(
    github_app: FakeGitHub, git_server: GitServer, tmp_path: Path
) -> None:
    token = (await mint(github_app, "hello", {"contents": "write"})).token
    done = clone(tmp_path, git_server, token, OTHER_REPO)
    assert done.returncode != 0
    assert "403" in done.stderr
    assert any(r.status == 403 and OTHER_REPO in r.path for r in git_server.requests)
    assert clone(tmp_path, git_server, token, HELLO_REPO).returncode == 0


async def test_a_read_token_fetches_but_cannot_push(
    github_app: FakeGitHub, git_server: GitServer, tmp_path: Path
) -> None:
    token = (await mint(github_app, "hello", {"contents": "read"})).token
    dest = commit_branch(tmp_path, git_server, token, HELLO_REPO, "topic")  # the clone works
    pushed = push(tmp_path, git_server, token, dest, "topic")
    assert pushed.returncode != 0
    assert "403" in pushed.stderr
    assert bare_branch(git_server, HELLO_REPO, "topic") is None


async def test_a_pull_requests_token_cannot_fetch(
    github_app: FakeGitHub, git_server: GitServer, tmp_path: Path
) -> None:
    token = (await mint(github_app, "hello", {"pull_requests": "write"})).token
    assert clone(tmp_path, git_server, token, HELLO_REPO).returncode != 0


async def test_an_expired_token_is_refused_and_a_new_one_works(
    github_app: FakeGitHub, git_server: GitServer, tmp_path: Path
) -> None:
    first = (await mint(github_app, "hello", {"contents": "write"})).token
    dest = commit_branch(tmp_path, git_server, first, HELLO_REPO, "topic")
    github_app.expire_all()
    refused = push(tmp_path, git_server, first, dest, "topic")
    assert refused.returncode != 0
    assert bare_branch(git_server, HELLO_REPO, "topic") is None
    second = (await mint(github_app, "hello", {"contents": "write"})).token
    pushed = push(tmp_path, git_server, second, dest, "topic")
    assert pushed.returncode == 0, pushed.stderr
    assert bare_branch(git_server, HELLO_REPO, "topic") is not None


async def test_the_static_token_may_do_anything(
    github_app: FakeGitHub, git_server: GitServer, tmp_path: Path
) -> None:
    github_app.static_token = git_server.token
    dest = commit_branch(tmp_path, git_server, git_server.token, OTHER_REPO, "topic")
    pushed = push(tmp_path, git_server, git_server.token, dest, "topic")
    assert pushed.returncode == 0, pushed.stderr
    async with token_client(github_app, git_server.token) as gh:
        data = {"title": "Topic", "head": "topic", "base": "main"}
        created = await gh.rest.pulls.async_create("octo", "other", data=data)
    assert created.status_code == 201


def test_without_an_authorizer_the_git_server_keeps_its_single_token(
    git_server: GitServer, tmp_path: Path
) -> None:
    assert git_server.authorize is None
    assert clone(tmp_path, git_server, git_server.token, HELLO_REPO).returncode == 0


# -- pull requests ------------------------------------------------------------------------------


@pytest.fixture
async def topic_pushed(
    github_app: FakeGitHub, git_server: GitServer, tmp_path: Path
) -> AsyncIterator[str]:
    """Branch `topic` of `octo/hello` pushed with a contents token; yields a pull_requests token."""
    token = (await mint(github_app, "hello", {"contents": "write"})).token
    dest = commit_branch(tmp_path, git_server, token, HELLO_REPO, "topic")
    assert push(tmp_path, git_server, token, dest, "topic").returncode == 0
    yield (await mint(github_app, "hello", {"pull_requests": "write"})).token


async def test_a_pull_request_is_created_listed_and_not_opened_twice(
    github_app: FakeGitHub, git_server: GitServer, topic_pushed: str
) -> None:
    data = {"title": "Add NEW.md", "head": "topic", "base": "main", "body": "Why.", "draft": True}
    async with token_client(github_app, topic_pushed) as gh:
        created = await gh.rest.pulls.async_create("octo", "hello", data=data)
        listed = await gh.rest.pulls.async_list("octo", "hello", state="open", head="octo:topic")
        others = await gh.rest.pulls.async_list("octo", "hello", head="octo:feature")
        with pytest.raises(RequestFailed) as caught:
            await gh.rest.pulls.async_create("octo", "hello", data=data)
    assert created.status_code == 201
    pull = created.parsed_data
    assert isinstance(pull, PullRequest)
    assert pull.number == 1 and pull.draft is True and pull.state == "open"
    assert pull.title == "Add NEW.md" and pull.body == "Why."
    assert pull.html_url == f"{git_server.base_url}{HELLO_REPO}/pull/1"
    assert pull.head.ref == "topic" and pull.head.label == "octo:topic"
    assert pull.head.sha == bare_branch(git_server, HELLO_REPO, "topic")
    assert pull.base.ref == "main"
    assert [p.number for p in listed.parsed_data] == [1]
    assert others.parsed_data == []
    assert caught.value.response.status_code == 422
    assert "A pull request already exists for octo:topic" in caught.value.response.text
    assert len(github_app.pulls) == 1
    # Every pulls call carried the installation token, as `token <t>`.
    pulls = [r for r in github_app.requests if r.path.endswith("/pulls")]
    assert {r.authorization for r in pulls} == {f"token {topic_pushed}"}


async def test_a_pull_request_needs_its_head_in_the_repository(
    github_app: FakeGitHub, topic_pushed: str
) -> None:
    async with token_client(github_app, topic_pushed) as gh:
        with pytest.raises(RequestFailed) as caught:
            data = {"title": "Nothing", "head": "not-pushed", "base": "main"}
            await gh.rest.pulls.async_create("octo", "hello", data=data)
    assert caught.value.response.status_code == 422
    assert caught.value.response.json()["errors"][0]["field"] == "head"
    assert github_app.pulls == []


async def test_pull_requests_need_a_live_token_of_their_repository_with_the_permission(
    github_app: FakeGitHub, topic_pushed: str
) -> None:
    data = {"title": "Add NEW.md", "head": "topic", "base": "main"}
    contents = (await mint(github_app, "hello", {"contents": "write"})).token
    other = (await mint(github_app, "other", {"pull_requests": "write"})).token
    read = (await mint(github_app, "hello", {"pull_requests": "read"})).token
    for token, status in ((contents, 403), (other, 403), (read, 403), ("ghs_unknown", 401)):
        async with token_client(github_app, token) as gh:
            with pytest.raises(RequestFailed) as caught:
                await gh.rest.pulls.async_create("octo", "hello", data=data)
        assert caught.value.response.status_code == status, token
    async with token_client(github_app, read) as gh:
        assert (await gh.rest.pulls.async_list("octo", "hello")).parsed_data == []
    github_app.expire_all()
    async with token_client(github_app, topic_pushed) as gh:
        with pytest.raises(RequestFailed) as caught:
            await gh.rest.pulls.async_create("octo", "hello", data=data)
    assert caught.value.response.status_code == 401
    assert github_app.pulls == []


def test_gateway_env_makes_the_fake_the_gateways_github_app(
    github_app: FakeGitHub, git_server: GitServer
) -> None:
    env = github_app.gateway_env
    assert env["MODAL_WORKSPACE_GITHUB_URL"] == git_server.base_url
    assert env["MODAL_WORKSPACE_GITHUB_API_URL"] == github_app.api_url
    assert env["MODAL_WORKSPACE_GITHUB_APP_ID"] == str(github_app.app_id)
    assert env["MODAL_WORKSPACE_GITHUB_APP_PRIVATE_KEY"].startswith("-----BEGIN PRIVATE KEY-----")
    assert env["MODAL_WORKSPACE_HOST_PORTS"] == str(git_server.port)
    # The product's settings take every one of them.
    settings = load_settings(env | {"MODAL_WORKSPACE_MCP_TOKEN": TOKEN})
    assert settings.github_api_url == github_app.api_url.rstrip("/")
    assert settings.host_ports == (git_server.port,)
    assert settings.github_app_id == str(github_app.app_id)
