"""Delivering a repository's work: commit, and push a branch (the pull request that follows is
`pull_request`).

A commit is the workspace's own git, run by the gateway. A push is one realtime exec of two
steps (`git.delivery`): the token, minted for this push and this repository alone
(`git.credentials`), reaches only the agent step's git through its askpass. What the push did
(whether it created the branch, the old and new tips, its commits and files) is read from that
step's report channel alone (`exec.status` with `report`), never from the exec's output, which
any process of the workspace may write to.

A push goes to a new branch under the workspace's namespace (`agent/<workspace>/<branch>`)
unless the caller names one. It is never forced onto a branch this workspace did not create:
the first push that creates a branch records it (a managed tag, out of the workspace's reach),
and `force` is then a `--force-with-lease` on the commit this workspace last pushed there.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, Field

from ... import policy
from ...errors import (
    ConflictError,
    InvalidArgumentError,
    PermissionDeniedError,
    WorkspaceError,
    core_refusal,
)
from ...git import commands as gitcmd
from ...git import credentials, delivery
from ..exec_engine import drain, git_query, run_to_end
from ..machinery.fields import GitRef, Input, Output, WorkspaceId, WorkspacePath
from ..machinery.fitting import KeepFirst
from ..machinery.limits import Bound
from ..machinery.table import PUBLISH, WRITE, WS, Declarations
from ..network_git import agent_paths
from .repository import (
    DESTINATION,
    LAST_PUSH_TAG,
    git_failure,
    origin_repo,
    recorded_destination,
)

if TYPE_CHECKING:
    from ...drivers.base import WorkspaceRecord
    from ...runtime.service import Service

declare = Declarations()
log = logging.getLogger("modal_workspace_core.repo")

# How long a push may run before the agent ends it.
PUSH_TIMEOUT_SECONDS = 1800
MAX_COMMIT_PATHS = 1000

CommitMessage = Annotated[str, AfterValidator(policy.commit_message)]
AuthorName = Annotated[str, AfterValidator(policy.author_name)]
AuthorEmail = Annotated[str, AfterValidator(policy.author_email)]


# --- inputs --------------------------------------------------------------------------------------


class RepoCommitInput(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath | None = Field(None, description=DESTINATION)
    message: CommitMessage = Field(description="Its message.")
    paths: list[WorkspacePath] | None = Field(
        None,
        max_length=MAX_COMMIT_PATHS,
        description="Only these, in the repository (default: every change).",
    )
    author_name: AuthorName | None = Field(None, description="Default: the gateway's.")
    author_email: AuthorEmail | None = Field(None, description="Default: the gateway's.")


class RepoPushInput(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath | None = Field(None, description=DESTINATION)
    branch: GitRef | None = Field(None, description="Local; default: the current one.")
    remote_branch: GitRef | None = Field(
        None,
        description="Default: agent/<workspace_id>/<branch>.",
    )
    force: bool = Field(
        False,
        description="--force-with-lease, only onto a branch this workspace created.",
    )
    wait_seconds: float = Field(
        600, ge=0, le=3600, description="Then answer state running: follow exec_id."
    )


# --- outputs -------------------------------------------------------------------------------------


class ChangedFile(Output):
    path: str = Field(description="The path, relative to the repository.")
    added: int | None = Field(default=None, description="Lines added (null for binary).")
    removed: int | None = Field(default=None, description="Lines removed (null for binary).")


class RepoCommitResult(Output):
    destination: str = Field(description="The repository's directory.")
    commit: str = Field(description="The new commit.")
    branch: str | None = Field(description="The branch it is on (null when detached).")
    files: list[ChangedFile] = Field(description="The files it changed (at most 1000).")
    truncated: bool = Field(default=False, description="It changed more files than listed.")

    gives_less = (KeepFirst("files"),)


class PushedCommit(Output):
    commit: str = Field(description="The commit id.")
    subject: str = Field(description="Its message's first line.")


class RepoPushResult(Output):
    exec_id: str = Field(description="The push's exec: its events hold git's output.")
    state: str = Field(description="finished, or running when wait_seconds passed first.")
    pushed: bool = Field(description="The remote branch now points at `commit`.")
    repository: str = Field(description="The canonical repository URL.")
    destination: str = Field(description="The repository's directory.")
    branch: str = Field(description="The local branch pushed.")
    remote_branch: str = Field(description="The branch on GitHub.")
    branch_url: str = Field(description="The remote branch on the web.")
    created: bool = Field(description="The push created the remote branch.")
    forced: bool = Field(description="The push replaced the remote branch (force-with-lease).")
    commit: str | None = Field(default=None, description="The commit pushed.")
    previous: str | None = Field(default=None, description="What the remote branch was before.")
    commit_count: int = Field(default=0, description="How many commits the push added.")
    commits: list[PushedCommit] = Field(
        default_factory=list, description="The commits the push added (the newest 200)."
    )
    file_count: int = Field(default=0, description="How many files those commits touched.")
    files: list[str] = Field(default_factory=list, description="Those files (the first 200).")
    truncated: bool = Field(
        default=False, description="More commits or files than listed (see the counts)."
    )
    error: str | None = Field(default=None, description="Why the push failed.")

    # The files go first: the commits are what a person reviews before a pull request.
    gives_less = (KeepFirst("files"), KeepFirst("commits"))


# --- commit --------------------------------------------------------------------------------------


def _repo_relative(dest: str, path: str) -> str:
    """A commit path (a canonical /workspace path) relative to the repository at `dest`."""
    if path == dest:
        return "."
    if not path.startswith(dest + "/"):
        raise InvalidArgumentError(
            f"paths: {path[:200]} is not inside the repository {dest}", field="paths"
        )
    return path[len(dest) + 1 :]


@declare(
    method="POST",
    path=WS + "/repo/commit",
    hints=WRITE,
    summary="Commit the repository's changes.",
    limits="Nothing to commit: 409.",
)
async def repo_commit(svc: Service, inp: RepoCommitInput) -> RepoCommitResult:
    record = await svc.record(inp.workspace_id)
    record, dest = await recorded_destination(svc, record, inp.destination)
    paths = [_repo_relative(dest, p) for p in inp.paths] if inp.paths else None
    name = inp.author_name or svc.settings.git_author_name
    email = inp.author_email or svc.settings.git_author_email
    done = await run_to_end(
        svc,
        record,
        argv=delivery.commit_argv(dest, inp.message, paths),
        env=delivery.commit_env(name, email),
        timeout_seconds=300,
        cap=256 * 1024,
        head_only=True,
        internal=True,
    )
    code = done.status.get("returncode")
    if code == delivery.NOTHING_TO_COMMIT:
        what = "the listed paths have" if paths else "the working tree has"
        raise ConflictError(f"nothing to commit: {what} no changes in {dest}")
    # The facts are the workspace's own git's, printed on an output its processes may write to:
    # they are answered to the client and never recorded nor decided on (the commit is the
    # workspace's to make, and what a push sends is read from the push's own report).
    facts = delivery.parse_commit(done.stdout.head.decode(errors="replace"))
    if code != 0 or facts is None:
        raise git_failure(done.stderr.text() or "git commit failed", dest)
    return RepoCommitResult(
        destination=dest,
        commit=facts.commit,
        branch=facts.branch,
        files=[ChangedFile.model_validate(f) for f in facts.files],
        truncated=facts.truncated,
    )


# --- push ----------------------------------------------------------------------------------------


def default_remote_branch(workspace_id: str, branch: str) -> str:
    return policy.git_ref(f"agent/{workspace_id}/{branch}")


async def _current_branch(svc: Service, record: WorkspaceRecord, dest: str) -> str:
    """The repository's current branch, as its git prints it on an output the workspace's
    processes may write to: the workspace's to name as it could by a checkout, held to the ref
    policy, and only ever the local branch (a default remote branch is under its namespace)."""
    argv = ["git", "-C", gitcmd.repo_dir(dest), "symbolic-ref", "--quiet", "--short", "HEAD"]
    done = await git_query(svc, record, argv)
    name = done.stdout.head.decode(errors="replace").strip()
    if done.status.get("returncode") != 0 or not name:
        stderr = done.stderr.text()
        if stderr:
            raise git_failure(stderr, dest)
        raise InvalidArgumentError(
            "branch: HEAD is detached in this repository; name the branch to push "
            "(or create one with repo_checkout create_branch)",
            field="branch",
        )
    with core_refusal(None, about="branch: the current branch is not pushable"):
        return policy.git_ref(name)


@declare(
    method="POST",
    path=WS + "/repo/push",
    hints=PUBLISH,
    summary="Push a branch to GitHub, a new one by default.",
    limits="Answers the commits and files it pushed: show them to the user; or error.",
    bounds={
        "actions": {"wait_seconds": Bound(30, 30)},
        "mcp": {"wait_seconds": Bound(45, 45)},
    },
)
async def repo_push(svc: Service, inp: RepoPushInput) -> RepoPushResult:
    record = await svc.record(inp.workspace_id)
    ws = record.workspace_id
    record, dest = await recorded_destination(svc, record, inp.destination)
    agent_dir, askpass = await agent_paths(svc, ws)
    repo = await origin_repo(svc, record, dest)
    base = svc.settings.github_url
    branch = inp.branch or await _current_branch(svc, record, dest)
    remote_branch = inp.remote_branch or default_remote_branch(ws, branch)
    record_key = delivery.push_record_key(ws, repo.url, remote_branch)
    lease = record.tags.get(record_key)
    if inp.force and lease is None:
        raise PermissionDeniedError(
            f"force: {remote_branch} is not a branch this workspace created by a push; only its "
            "own branches may be replaced (push without force, or to a new branch)",
            field="force",
        )
    credential = await credentials.for_workspace_git(
        svc, record, repo, credentials.PUSH, "repo_push"
    )
    exec_id = policy.new_id("ex")
    bundle_dir, bundle_name = delivery.bundle_path(exec_id)
    bundle = f"{bundle_dir}/{bundle_name}"
    mirror = gitcmd.mirror_path(agent_dir, dest)
    steps: list[dict[str, Any]] = [
        {
            "argv": delivery.bundle_argv(dest, branch, bundle),
            "env": dict(gitcmd.WORKSPACE_STEP_ENV),
            "workdir": record.root,
        },
        {
            "identity": "agent",
            "argv": delivery.push_argv(
                bundle_dir,
                bundle_name,
                mirror,
                repo.url_on(base),
                branch,
                remote_branch,
                lease if inp.force else None,
            ),
            "env": delivery.push_env(askpass, base),
            "credential": {"base": gitcmd.base_origin(base), "token": credential.token},
            # What it pushed, on a channel of its own: the step is the exec's last, and no
            # process of the workspace holds the channel.
            "report": True,
        },
    ]
    args = {
        "exec_id": exec_id,
        "steps": steps,
        "secrets": credential.redact,
        "timeout_seconds": PUSH_TIMEOUT_SECONDS,
    }
    await svc.request(ws, "exec.start", args)
    outcome = _PushOutcome(
        exec_id=exec_id,
        repository=repo.url,
        destination=dest,
        branch=branch,
        remote_branch=remote_branch,
        branch_url=f"{base}/{repo.slug}/tree/{remote_branch}",
        forced=inp.force,
    )
    # The push's bookkeeping runs to its end (a task the service owns) even when this answer
    # goes out first.
    finishing = svc.spawn(_finish_push(svc, record, bundle, record_key, lease, outcome))
    try:
        return await asyncio.wait_for(asyncio.shield(finishing), timeout=inp.wait_seconds)
    except TimeoutError:
        return outcome.result(state="running")


class _PushOutcome:
    def __init__(self, **facts: Any) -> None:
        self.facts = facts

    def result(self, **more: Any) -> RepoPushResult:
        defaults = {"state": "running", "pushed": False, "created": False}
        return RepoPushResult.model_validate({**defaults, **self.facts, **more})


async def _finish_push(
    svc: Service,
    record: WorkspaceRecord,
    bundle: str,
    record_key: str,
    lease: str | None,
    outcome: _PushOutcome,
) -> RepoPushResult:
    """Waits for the push to end, reads its report and records the branch it created; then
    removes the bundle, however the push ended."""
    try:
        return await _push_outcome(svc, record.workspace_id, record_key, lease, outcome)
    finally:
        await _remove_bundle(svc, record, bundle)


async def _push_outcome(
    svc: Service, ws: str, record_key: str, lease: str | None, outcome: _PushOutcome
) -> RepoPushResult:
    exec_id = outcome.facts["exec_id"]
    # The output is followed for progress and for git's stderr (an error's words, shown to the
    # client); the exec's outcome and the push's report come from the agent's record alone.
    done = await drain(
        svc, ws, exec_id, timeout_seconds=PUSH_TIMEOUT_SECONDS, cap=64 * 1024, head_only=False
    )
    status, _ = await svc.request(ws, "exec.status", {"exec_id": exec_id, "report": True})
    text = status.get("report")
    report = delivery.parse_push_report(
        text if isinstance(text, str) else "", truncated=status.get("report_truncated") is True
    )
    remote_branch = outcome.facts["remote_branch"]
    state = str(status.get("state", "finished"))
    pushed = report.pushed and status.get("returncode") == 0 and report.new is not None
    created = pushed and report.created(remote_branch)
    if pushed and (created or lease is not None):
        # This workspace's own branch (created now, or by an earlier push): what it may force
        # again, on the commit it pushed.
        assert report.new is not None
        await svc.merge_tags(ws, {record_key: report.new, LAST_PUSH_TAG: remote_branch})
    elif pushed:
        await svc.merge_tags(ws, {LAST_PUSH_TAG: remote_branch})
    error = None if pushed else _push_error(report, remote_branch, done.stderr.text(), state)
    return outcome.result(
        state=state,
        pushed=pushed,
        created=created,
        commit=report.new,
        previous=report.old,
        commit_count=report.commit_count,
        commits=report.commits,
        file_count=report.file_count,
        files=report.files,
        truncated=report.commit_count > len(report.commits)
        or report.file_count > len(report.files),
        error=error,
    )


async def _remove_bundle(svc: Service, record: WorkspaceRecord, bundle: str) -> None:
    """Removes the push's bundle from the workspace's /tmp, however the push ended: an exec of
    the workspace's own after the push's, whose output nobody reads."""
    try:
        await run_to_end(
            svc,
            record,
            argv=delivery.remove_bundle_argv(bundle),
            env={},
            timeout_seconds=60,
            cap=1024,
            internal=True,
        )
    except (WorkspaceError, TimeoutError) as exc:
        # The workspace's own commits, in its own /tmp: left there, nothing is exposed.
        log.warning("could not remove the push's bundle in %s: %s", record.workspace_id, exc)


def _push_error(report: delivery.PushReport, remote_branch: str, stderr: str, state: str) -> str:
    """Why a push failed, in words an agent can act on: git's porcelain status of the ref in the
    push's report (`!<TAB>src:dst<TAB>[rejected] (reason)`), else the end of its stderr (which
    the workspace's processes may also write: words for the client, never decided on)."""
    if state != "finished":
        return f"the push was {state}"
    status = report.status_of(remote_branch)
    reason = status[1] if status is not None and status[0] == "!" else ""
    if "stale info" in reason:
        return "the remote branch changed since this workspace pushed it: not replaced"
    if "non-fast-forward" in reason or "fetch first" in reason:
        return (
            "the remote branch has commits this branch does not: fetch and merge or rebase, "
            "or push to a new branch"
        )
    if reason:
        return f"GitHub refused the push: {reason[:300]}"
    return stderr.strip()[-800:] or "the push failed"
