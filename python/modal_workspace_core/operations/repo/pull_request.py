"""Opening a pull request from a pushed branch: the gateway itself, through GitHub's REST API
(githubkit, `MODAL_WORKSPACE_GITHUB_API_URL`), with a token minted for it alone
(`git.credentials`: `pull_requests: write` on the one repository). The token never enters the
workspace. While a pull request is open for the branch, asking again answers it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from githubkit.exception import GitHubException, RequestFailed
from pydantic import AfterValidator, Field

from ... import policy
from ...errors import InvalidArgumentError, NotFoundError, PermissionDeniedError, UpstreamError
from ...git import credentials
from ..machinery.fields import GitRef, Input, Output, WorkspaceId, WorkspacePath
from ..machinery.table import PUBLISH_ONCE, WS, Declarations
from .repository import DESTINATION, LAST_PUSH_TAG, origin_repo, recorded_destination

if TYPE_CHECKING:
    from ...runtime.service import Service

declare = Declarations()

Title = Annotated[str, AfterValidator(policy.pull_request_title)]
Body = Annotated[str, AfterValidator(policy.pull_request_body)]


class RepoPullRequestInput(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath | None = Field(None, description=DESTINATION)
    head: GitRef | None = Field(None, description="Default: the last one pushed.")
    base: GitRef | None = Field(None, description="Default: the repository's default.")
    title: Title = Field(description="Its title.")
    body: Body = Field("", description="Markdown.")
    draft: bool = Field(True, description="As a draft.")


class RepoPullRequestResult(Output):
    number: int = Field(description="The pull request's number.")
    url: str = Field(description="The pull request on the web.")
    state: str = Field(description="open or closed.")
    draft: bool = Field(description="It is a draft.")
    created: bool = Field(description="Opened now (false: the open one for this head).")
    head: str = Field(description="Its branch.")
    base: str = Field(description="The branch it merges into.")
    title: str = Field(description="Its title.")


@declare(
    method="POST",
    path=WS + "/repo/pull-request",
    hints=PUBLISH_ONCE,
    summary="Open a pull request from a pushed branch.",
    limits="Asked again for the same branch, answers the one open.",
)
async def repo_pull_request(svc: Service, inp: RepoPullRequestInput) -> RepoPullRequestResult:
    record = await svc.record(inp.workspace_id)
    record, dest = await recorded_destination(svc, record, inp.destination)
    repo = await origin_repo(svc, record, dest)
    head = inp.head or record.tags.get(LAST_PUSH_TAG)
    if head is None:
        raise InvalidArgumentError(
            "head: this workspace has pushed no branch; repo_push first, or name the branch",
            field="head",
        )
    head = policy.git_ref(head)
    credential = await credentials.for_operation(
        svc, repo, credentials.PULL_REQUEST, "repo_pull_request"
    )
    gh = credentials.rest_client(svc, credential)
    try:
        found = await _open_pull(gh, repo, head)
        if found is not None:
            return _pull_result(found, created=False)
        base = inp.base or await _default_branch(gh, repo)
        try:
            opened = await gh.arequest(
                "POST",
                f"/repos/{repo.owner}/{repo.name}/pulls",
                json={
                    "title": inp.title,
                    "head": head,
                    "base": base,
                    "body": inp.body,
                    "draft": inp.draft,
                },
            )
        except RequestFailed as exc:
            if exc.response.status_code == 422 and (again := await _open_pull(gh, repo, head)):
                return _pull_result(again, created=False)  # another call opened it meanwhile
            raise
        return _pull_result(opened.json(), created=True)
    except RequestFailed as exc:
        raise _api_error(exc, repo, head) from None
    except GitHubException as exc:
        raise UpstreamError(f"could not reach the GitHub API: {type(exc).__name__}") from None


async def _open_pull(gh: Any, repo: policy.GitHubRepo, head: str) -> dict[str, Any] | None:
    listed = await gh.arequest(
        "GET",
        f"/repos/{repo.owner}/{repo.name}/pulls",
        params={"state": "open", "head": f"{repo.owner}:{head}", "per_page": 10},
    )
    pulls = listed.json()
    if isinstance(pulls, list):
        for pull in pulls:
            if isinstance(pull, dict) and (pull.get("head") or {}).get("ref") == head:
                return pull
    return None


async def _default_branch(gh: Any, repo: policy.GitHubRepo) -> str:
    answer = await gh.arequest("GET", f"/repos/{repo.owner}/{repo.name}")
    branch = answer.json().get("default_branch")
    if not isinstance(branch, str):
        raise UpstreamError(f"GitHub named no default branch for {repo.slug}: give base")
    return policy.git_ref(branch)


def _pull_result(pull: dict[str, Any], *, created: bool) -> RepoPullRequestResult:
    try:
        return RepoPullRequestResult(
            number=int(pull["number"]),
            url=str(pull["html_url"]),
            state=str(pull.get("state", "open")),
            draft=bool(pull.get("draft", False)),
            created=created,
            head=str(pull["head"]["ref"]),
            base=str(pull["base"]["ref"]),
            title=str(pull.get("title", "")),
        )
    except (KeyError, TypeError, ValueError):
        raise UpstreamError("GitHub's answer is not a pull request") from None


def _api_error(exc: RequestFailed, repo: policy.GitHubRepo, head: str) -> Exception:
    status = exc.response.status_code
    try:
        message = str(exc.response.json().get("message", ""))[:300]
    except ValueError:
        message = ""
    if status == 422:
        return InvalidArgumentError(
            f"GitHub refused the pull request: {message or 'unprocessable'} (is {head} pushed?)"
        )
    if status in (401, 403):
        return PermissionDeniedError(f"GitHub refused the pull request on {repo.slug} ({status})")
    if status == 404:
        return NotFoundError(f"GitHub has no repository {repo.slug} this token can see")
    return UpstreamError(f"the GitHub API answered {status}: {message}")
