"""A fake GitHub REST API for tests: a GitHub App's installations, the tokens they mint, and pull
requests, served by uvicorn on 127.0.0.1 in front of the test git server (`git_server.py`).

It checks what GitHub checks (the App's RS256 JWT, each installation token's expiry, repository
and permissions) and answers in GitHub's shapes, so the real client (`githubkit`) parses them; it
also authorizes the git server's pushes and fetches with the same tokens. Every request is
recorded, so a test can tell which credential was used where.
"""

from __future__ import annotations

import functools
import hmac
import json
import secrets
import socket
import string
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
import pytest
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.middleware.base import RequestResponseEndpoint

from support.git_server import HELLO_REPO, GitServer

DEFAULT_INSTALLATION_ID = 4242
# The settings the product reads to act as a GitHub App (the git server's settings come too).
API_URL_ENV = "MODAL_WORKSPACE_GITHUB_API_URL"
APP_ID_ENV = "MODAL_WORKSPACE_GITHUB_APP_ID"
APP_PRIVATE_KEY_ENV = "MODAL_WORKSPACE_GITHUB_APP_PRIVATE_KEY"

# What an App's installation is granted; a token asks for some of it (or all, by default).
_INSTALLATION_PERMISSIONS = {"contents": "write", "pull_requests": "write", "metadata": "read"}
_LEVELS = {"read": 1, "write": 2}
# GitHub accepts an App's JWT with `exp` at most ten minutes after `iat`, and tolerates clocks
# a little off; githubkit dates `iat` a minute back for that reason.
_JWT_MOST_SECONDS = 600
_CLOCK_SKEW_SECONDS = 60
_TOKEN_ALPHABET = string.ascii_letters + string.digits + "_"
_DOCS = "https://docs.github.com/rest"
_EPOCH = "2026-01-01T00:00:00Z"


@dataclass
class MintedToken:
    """An installation token, with the scope it was minted for."""

    token: str
    installation_id: int
    repositories: tuple[str, ...]  # slugs `OWNER/NAME`
    permissions: dict[str, str]
    expires_at: datetime

    @property
    def live(self) -> bool:
        return datetime.now(UTC) < self.expires_at

    def grants(self, slug: str, permission: str, level: str) -> bool:
        held = self.permissions.get(permission)
        return (
            self.live
            and slug in self.repositories
            and held is not None
            and _LEVELS[held] >= _LEVELS[level]
        )


@dataclass
class SeenApiRequest:
    method: str
    path: str
    authorization: str | None
    status: int


@dataclass
class FakePull:
    """A pull request as the fake holds it (its JSON is built from this on every answer)."""

    slug: str
    number: int
    title: str
    head: str  # a branch of `slug`
    head_sha: str
    base: str
    body: str | None
    draft: bool
    state: str = "open"
    created_at: str = field(default_factory=lambda: _timestamp(datetime.now(UTC)))


@dataclass
class _Repo:
    slug: str
    id: int
    installation_id: int


class _Refused(Exception):
    """Answered as GitHub answers an error: `{"message", "documentation_url", "status"}`."""

    def __init__(self, status: int, message: str, errors: list[dict[str, str]] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors


@functools.cache
def _app_key() -> rsa.RSAPrivateKey:
    # One key per test session: generating one costs more than every request that uses it.
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class FakeGitHub:
    """GitHub's REST API for one App (`app_id`, `private_key_pem`) installed on the repositories
    of `git` that `add_repo` names. `static_token`, when set, is a classic token that may do
    anything (today's `GH_TOKEN`)."""

    def __init__(self, git: GitServer, app_id: int = 1234567) -> None:
        self.git = git
        self.app_id = app_id
        key = _app_key()
        self.private_key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        self._public_key = key.public_key()
        self.static_token: str | None = None
        self.token_ttl_seconds = 3600
        self.minted: list[MintedToken] = []
        # Tokens the next mints hand out, in order (then random ones again).
        self.next_tokens: list[str] = []
        self.pulls: list[FakePull] = []
        self.requests: list[SeenApiRequest] = []
        self.api_url = ""
        self._repos: dict[str, _Repo] = {}
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # -- what tests set up and read ---------------------------------------------------------

    def add_repo(self, slug: str, installation_id: int = DEFAULT_INSTALLATION_ID) -> None:
        """Installs the App on `slug` (`OWNER/NAME`, a repository of the git server)."""
        with self._lock:
            self._repos[slug] = _Repo(slug, 100_000 + len(self._repos), installation_id)

    def expire_all(self) -> None:
        """Every token minted so far is dead from now on (as an hour passing would make it)."""
        dead = datetime.now(UTC) - timedelta(seconds=1)
        with self._lock:
            for minted in self.minted:
                minted.expires_at = dead

    @property
    def authorizations(self) -> list[str]:
        """Every Authorization header the API received, in order (including wrong ones)."""
        with self._lock:
            return [r.authorization for r in self.requests if r.authorization is not None]

    @property
    def port(self) -> int:
        return int(self.api_url.rstrip("/").rsplit(":", 1)[1])

    @property
    def gateway_env(self) -> dict[str, str]:
        """The gateway settings that make this fake its GitHub App, with the git server's. The
        API's port is not among the host ports workspaces may reach: only the gateway calls
        the API, and a workspace that could would hold nothing to call it with."""
        return dict(self.git.gateway_env) | {
            API_URL_ENV: self.api_url,
            APP_ID_ENV: str(self.app_id),
            APP_PRIVATE_KEY_ENV: self.private_key_pem,
        }

    def authorize_git(self, slug: str, username: str, password: str, write: bool) -> bool:
        """The git server's check: an installation token (user `x-access-token`) that is live,
        scoped to `slug` and holds `contents` (write to push), or the static token."""
        if self.static_token is not None and hmac.compare_digest(
            password.encode(), self.static_token.encode()
        ):
            return True
        if username != "x-access-token":
            return False
        minted = self._minted(password)
        return minted is not None and minted.grants(slug, "contents", "write" if write else "read")

    # -- running ----------------------------------------------------------------------------

    def start(self) -> FakeGitHub:
        sock = socket.create_server(("127.0.0.1", 0))
        self.api_url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        config = uvicorn.Config(self._app(), log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="fake-github", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake GitHub API did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(30)
            self._server = None

    # -- the API ----------------------------------------------------------------------------

    def _app(self) -> FastAPI:
        app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

        @app.middleware("http")
        async def record(request: Request, call_next: RequestResponseEndpoint) -> Response:
            response = await call_next(request)
            seen = SeenApiRequest(
                request.method,
                request.url.path,
                request.headers.get("authorization"),
                response.status_code,
            )
            # Recorded before answering: a client that has its answer finds its request here.
            with self._lock:
                self.requests.append(seen)
            return response

        @app.exception_handler(_Refused)
        async def refused(request: Request, exc: _Refused) -> JSONResponse:
            return _error(exc)

        @app.get("/repos/{owner}/{name}/installation")
        async def repo_installation(owner: str, name: str, request: Request) -> JSONResponse:
            self._check_jwt(request)
            repo = self._repo(f"{owner}/{name}")
            return JSONResponse(self._installation_json(repo.installation_id))

        @app.post("/app/installations/{installation_id}/access_tokens")
        async def access_tokens(installation_id: int, request: Request) -> JSONResponse:
            self._check_jwt(request)
            body = await _json_object(request)
            minted = self._mint(installation_id, body)
            repositories = [self._repository_json(self._repos[s]) for s in minted.repositories]
            answer = {
                "token": minted.token,
                "expires_at": _timestamp(minted.expires_at),
                "permissions": minted.permissions,
                "repository_selection": "selected",
                "repositories": repositories,
            }
            return JSONResponse(answer, status_code=201)

        @app.get("/repos/{owner}/{name}")
        async def get_repo(owner: str, name: str, request: Request) -> JSONResponse:
            slug = f"{owner}/{name}"
            # Any token of the repository may read it (every installation token has metadata).
            self._check_token(request, slug, "metadata", "read")
            return JSONResponse(self._repository_json(self._repo(slug)))

        @app.get("/repos/{owner}/{name}/pulls")
        async def list_pulls(owner: str, name: str, request: Request) -> JSONResponse:
            slug = f"{owner}/{name}"
            self._check_token(request, slug, "pull_requests", "read")
            query = request.query_params
            state = query.get("state", "open")
            head = query.get("head")
            base = query.get("base")
            with self._lock:
                found = [
                    p
                    for p in self.pulls
                    if p.slug == slug
                    and (state == "all" or p.state == state)
                    and (head is None or f"{owner}:{p.head}" == head)
                    and (base is None or p.base == base)
                ]
            return JSONResponse([self._pull_json(p) for p in found])

        @app.post("/repos/{owner}/{name}/pulls")
        async def create_pull(owner: str, name: str, request: Request) -> JSONResponse:
            slug = f"{owner}/{name}"
            self._check_token(request, slug, "pull_requests", "write")
            pull = self._open_pull(slug, await _json_object(request))
            return JSONResponse(self._pull_json(pull), status_code=201)

        return app

    def _check_jwt(self, request: Request) -> None:
        scheme, _, credential = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not credential:
            raise _Refused(401, "A JSON web token could not be decoded")
        try:
            claims = jwt.decode(
                credential.strip(),
                self._public_key,
                algorithms=["RS256"],
                options={"require": ["iat", "exp", "iss"]},
            )
        except jwt.PyJWTError as exc:
            raise _Refused(401, f"A JSON web token could not be decoded ({exc})") from None
        now = time.time()
        if str(claims["iss"]) != str(self.app_id):
            raise _Refused(401, "'Issuer' claim ('iss') must be the App's id")
        if not isinstance(claims["iat"], int) or claims["iat"] > now + _CLOCK_SKEW_SECONDS:
            raise _Refused(401, "'Issued at' claim ('iat') must be an Integer in the past")
        if claims["exp"] - claims["iat"] > _JWT_MOST_SECONDS:
            raise _Refused(401, "'Expiration time' claim ('exp') is too far in the future")

    def _check_token(self, request: Request, slug: str, permission: str, level: str) -> None:
        scheme, _, credential = request.headers.get("authorization", "").partition(" ")
        credential = credential.strip()
        if scheme.lower() not in ("token", "bearer") or not credential:
            raise _Refused(401, "Requires authentication")
        if self.static_token is not None and hmac.compare_digest(
            credential.encode(), self.static_token.encode()
        ):
            self._repo(slug)
            return
        minted = self._minted(credential)
        if minted is None or not minted.live:
            raise _Refused(401, "Bad credentials")
        if not minted.grants(slug, permission, level):
            raise _Refused(403, "Resource not accessible by integration")

    def _minted(self, token: str) -> MintedToken | None:
        with self._lock:
            for minted in self.minted:
                if hmac.compare_digest(minted.token.encode(), token.encode()):
                    return minted
        return None

    def _repo(self, slug: str) -> _Repo:
        with self._lock:
            repo = self._repos.get(slug)
        if repo is None:
            raise _Refused(404, "Not Found")
        return repo

    def _mint(self, installation_id: int, body: dict[str, Any]) -> MintedToken:
        with self._lock:
            installed = [r for r in self._repos.values() if r.installation_id == installation_id]
        if not installed:
            raise _Refused(404, "Not Found")
        owner = installed[0].slug.split("/")[0]
        names = body.get("repositories", [r.slug.split("/")[1] for r in installed])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise _Refused(422, "Invalid request: repositories must be a list of names")
        slugs = tuple(f"{owner}/{n}" for n in names)
        if not set(slugs) <= {r.slug for r in installed}:
            raise _Refused(
                422, "There is at least one repository that does not exist or is not accessible"
            )
        wanted = body.get("permissions", _INSTALLATION_PERMISSIONS)
        if not isinstance(wanted, dict) or not all(
            isinstance(v, str)
            and v in _LEVELS
            and k in _INSTALLATION_PERMISSIONS
            and _LEVELS[v] <= _LEVELS[_INSTALLATION_PERMISSIONS[k]]
            for k, v in wanted.items()
        ):
            raise _Refused(422, "The permissions requested are not granted to this installation.")
        # GitHub adds `metadata: read` to every token that has a repository.
        permissions = {"metadata": "read", **wanted}
        # Not a fixed length: GitHub says the format will change, so nothing may assume one.
        length = 40 + secrets.randbelow(81)
        token = "ghs_" + "".join(secrets.choice(_TOKEN_ALPHABET) for _ in range(length - 4))
        with self._lock:
            if self.next_tokens:  # a test that must know a token before it is minted
                token = self.next_tokens.pop(0)
        expires = datetime.now(UTC).replace(microsecond=0) + timedelta(
            seconds=self.token_ttl_seconds
        )
        minted = MintedToken(token, installation_id, slugs, permissions, expires)
        with self._lock:
            self.minted.append(minted)
        return minted

    def _open_pull(self, slug: str, body: dict[str, Any]) -> FakePull:
        owner = slug.split("/")[0]
        title, head, base = body.get("title"), body.get("head"), body.get("base", "")
        if not isinstance(title, str) or not title or not isinstance(head, str):
            raise _Refused(422, "Invalid request: title and head are required strings")
        branch = head.split(":", 1)[1] if head.startswith(f"{owner}:") else head
        head_sha = self._branch_sha(slug, branch) if ":" not in branch else None
        if head_sha is None:
            raise _Refused(422, "Validation Failed", [_invalid("head")])
        if not isinstance(base, str) or self._branch_sha(slug, base) is None:
            raise _Refused(422, "Validation Failed", [_invalid("base")])
        with self._lock:
            if any(
                p.slug == slug and p.head == branch and p.base == base and p.state == "open"
                for p in self.pulls
            ):
                message = f"A pull request already exists for {owner}:{branch}."
                raise _Refused(
                    422,
                    "Validation Failed",
                    [{"resource": "PullRequest", "code": "custom", "message": message}],
                )
            number = 1 + sum(p.slug == slug for p in self.pulls)
            pull = FakePull(
                slug,
                number,
                title,
                branch,
                head_sha,
                base,
                body.get("body") if isinstance(body.get("body"), str) else None,
                body.get("draft") is True,
            )
            self.pulls.append(pull)
        return pull

    def _branch_sha(self, slug: str, branch: str) -> str | None:
        """The commit `branch` names in the git server's bare repository (None: no such branch)."""
        done = subprocess.run(
            [
                "git",
                "--git-dir",
                str(self.git.root / f"{slug}.git"),
                "rev-parse",
                "--verify",
                "--quiet",
                f"refs/heads/{branch}^{{commit}}",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip() if done.returncode == 0 else None

    # -- GitHub's shapes --------------------------------------------------------------------

    def _user_json(self, login: str, kind: str = "Organization") -> dict[str, Any]:
        api = f"{self.api_url}users/{login}"
        return {
            "login": login,
            "id": 1000 + sum(map(ord, login)),
            "node_id": f"MDQ6VXNlcj{login}",
            "avatar_url": f"{self.git.base_url}avatars/{login}",
            "gravatar_id": "",
            "url": api,
            "html_url": f"{self.git.base_url}{login}",
            "followers_url": f"{api}/followers",
            "following_url": f"{api}/following{{/other_user}}",
            "gists_url": f"{api}/gists{{/gist_id}}",
            "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs",
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events{{/privacy}}",
            "received_events_url": f"{api}/received_events",
            "type": kind,
            "site_admin": False,
        }

    def _installation_json(self, installation_id: int) -> dict[str, Any]:
        with self._lock:
            owner = next(
                r.slug.split("/")[0]
                for r in self._repos.values()
                if r.installation_id == installation_id
            )
        api = f"{self.api_url}app/installations/{installation_id}"
        return {
            "id": installation_id,
            "client_id": f"Iv23li{self.app_id}",
            "account": self._user_json(owner),
            "repository_selection": "selected",
            "access_tokens_url": f"{api}/access_tokens",
            "repositories_url": f"{self.api_url}installation/repositories",
            "html_url": f"{self.git.base_url}organizations/{owner}/settings/installations/"
            f"{installation_id}",
            "app_id": self.app_id,
            "app_slug": "modal-workspace-test",
            "target_id": self._user_json(owner)["id"],
            "target_type": "Organization",
            "permissions": dict(_INSTALLATION_PERMISSIONS),
            "events": [],
            "created_at": _EPOCH,
            "updated_at": _EPOCH,
            "single_file_name": None,
            "has_multiple_single_files": False,
            "single_file_paths": [],
            "suspended_by": None,
            "suspended_at": None,
        }

    def _repository_json(self, repo: _Repo) -> dict[str, Any]:
        owner, name = repo.slug.split("/")
        api = f"{self.api_url}repos/{repo.slug}"
        html = f"{self.git.base_url}{repo.slug}"
        templated = {
            "archive": "{archive_format}{/ref}", "assignees": "{/user}", "blobs": "{/sha}",
            "branches": "{/branch}", "collaborators": "{/collaborator}", "comments": "{/number}",
            "commits": "{/sha}", "compare": "{base}...{head}", "contents": "{+path}",
            "contributors": "", "deployments": "", "downloads": "", "events": "", "forks": "",
            "git_commits": "{/sha}", "git_refs": "{/sha}", "git_tags": "{/sha}",
            "issue_comment": "{/number}", "issue_events": "{/number}", "issues": "{/number}",
            "keys": "{/key_id}", "labels": "{/name}", "languages": "", "merges": "",
            "milestones": "{/number}", "notifications": "{?since,all,participating}",
            "pulls": "{/number}", "releases": "{/id}", "stargazers": "", "statuses": "{sha}",
            "subscribers": "", "subscription": "", "tags": "", "teams": "", "trees": "{/sha}",
            "hooks": "",
        }  # fmt: skip
        paths = {"git_commits": "git/commits", "git_refs": "git/refs", "git_tags": "git/tags",
                 "issue_comment": "issues/comments", "issue_events": "issues/events"}  # fmt: skip
        urls = {f"{k}_url": f"{api}/{paths.get(k, k)}{v}" for k, v in templated.items()}
        return {
            "id": repo.id,
            "node_id": f"R_kgDO{repo.id}",
            "name": name,
            "full_name": repo.slug,
            "owner": self._user_json(owner),
            "private": True,
            "html_url": html,
            "description": None,
            "fork": False,
            "url": api,
            **urls,
            "git_url": f"git://127.0.0.1/{repo.slug}.git",
            "ssh_url": f"git@127.0.0.1:{repo.slug}.git",
            "clone_url": self.git.repo_url(repo.slug),
            "svn_url": html,
            "mirror_url": None,
            "homepage": None,
            "language": None,
            "forks": 0,
            "forks_count": 0,
            "stargazers_count": 0,
            "watchers_count": 0,
            "watchers": 0,
            "size": 1,
            "default_branch": "main",
            "open_issues": 0,
            "open_issues_count": 0,
            "is_template": False,
            "topics": [],
            "has_issues": True,
            "has_projects": False,
            "has_wiki": False,
            "has_pages": False,
            "has_discussions": False,
            "archived": False,
            "disabled": False,
            "visibility": "private",
            "license": None,
            "pushed_at": _EPOCH,
            "created_at": _EPOCH,
            "updated_at": _EPOCH,
        }

    def _pull_json(self, pull: FakePull) -> dict[str, Any]:
        owner = pull.slug.split("/")[0]
        repo = self._repo(pull.slug)
        repository = self._repository_json(repo)
        api = f"{self.api_url}repos/{pull.slug}"
        url = f"{api}/pulls/{pull.number}"
        html = f"{self.git.base_url}{pull.slug}/pull/{pull.number}"
        author = self._user_json("modal-workspace-test[bot]", "Bot")
        links = {
            "self": url,
            "html": html,
            "issue": f"{api}/issues/{pull.number}",
            "comments": f"{api}/issues/{pull.number}/comments",
            "review_comments": f"{url}/comments",
            "review_comment": f"{api}/pulls/comments{{/number}}",
            "commits": f"{url}/commits",
            "statuses": f"{api}/statuses/{pull.head_sha}",
        }

        def side(ref: str, sha: str) -> dict[str, Any]:
            return {
                "label": f"{owner}:{ref}",
                "ref": ref,
                "sha": sha,
                "user": self._user_json(owner),
                "repo": repository,
            }

        return {
            "url": url,
            "id": repo.id * 1000 + pull.number,
            "node_id": f"PR_kwDO{repo.id}{pull.number}",
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "issue_url": links["issue"],
            "commits_url": links["commits"],
            "review_comments_url": links["review_comments"],
            "review_comment_url": links["review_comment"],
            "comments_url": links["comments"],
            "statuses_url": links["statuses"],
            "number": pull.number,
            "state": pull.state,
            "locked": False,
            "title": pull.title,
            "user": author,
            "body": pull.body,
            "labels": [],
            "milestone": None,
            "active_lock_reason": None,
            "created_at": pull.created_at,
            "updated_at": pull.created_at,
            "closed_at": None,
            "merged_at": None,
            "merge_commit_sha": None,
            "assignee": None,
            "assignees": [],
            "requested_reviewers": [],
            "requested_teams": [],
            "head": side(pull.head, pull.head_sha),
            "base": side(pull.base, self._branch_sha(pull.slug, pull.base) or ""),
            "_links": {k: {"href": v} for k, v in links.items()},
            "author_association": "NONE",
            "auto_merge": None,
            "draft": pull.draft,
            "merged": False,
            "mergeable": None,
            "rebaseable": None,
            "mergeable_state": "unknown",
            "merged_by": None,
            "comments": 0,
            "review_comments": 0,
            "maintainer_can_modify": False,
            "commits": 1,
            "additions": 0,
            "deletions": 0,
            "changed_files": 0,
        }


def _timestamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _invalid(name: str) -> dict[str, str]:
    return {"resource": "PullRequest", "field": name, "code": "invalid"}


def _error(refused: _Refused) -> JSONResponse:
    body: dict[str, Any] = {"message": refused.message, "documentation_url": _DOCS}
    if refused.errors is not None:
        body["errors"] = refused.errors
    body["status"] = str(refused.status)
    return JSONResponse(body, status_code=refused.status)


async def _json_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise _Refused(400, "Problems parsing JSON") from None
    if not isinstance(body, dict):
        raise _Refused(400, "Problems parsing JSON")
    return body


# A second repository of the same owner, for tokens that must not reach it.
OTHER_REPO = "octo/other"
OTHER_BRANCHES: dict[str, dict[str, str]] = {"main": {"README.md": "# other\n"}}


@pytest.fixture
def github_app(git_server: GitServer) -> Iterator[FakeGitHub]:
    """The fake GitHub API in front of `git_server`, its App installed on `octo/hello` and
    `octo/other` (added to the server); the git server then accepts only the App's tokens (or
    `static_token`, once a test sets it)."""
    git_server.create_repo(OTHER_REPO, OTHER_BRANCHES)
    fake = FakeGitHub(git_server)
    fake.add_repo(HELLO_REPO)
    fake.add_repo(OTHER_REPO)
    git_server.authorize = fake.authorize_git
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
        git_server.authorize = None
