"""Repositories: clone, fetch and checkout as realtime execs the client follows; status and
diff answered from git run by the gateway. Git's commands are built in `git.commands`; the
repository tags are recorded when a clone's stream ends (`git.pending`)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from .. import policy
from ..errors import (
    InvalidArgumentError,
    NotFoundError,
    UpstreamError,
    WorkspaceError,
    core_refusal,
)
from ..git import commands as gitcmd
from ..git import credentials, pending
from ..git.pending import pending_note, settle
from ..policy import WORKSPACE_ROOT
from .exec_engine import exec_args, git_query, run_to_end
from .machinery.fields import (
    MAX_OUTPUT_BYTES,
    GitRef,
    Input,
    Output,
    Repository,
    WorkspaceId,
    WorkspacePath,
)
from .machinery.limits import Bound
from .machinery.table import DESTROY, NETWORK, READ, WS, Declarations

if TYPE_CHECKING:
    from ..drivers.base import WorkspaceRecord
    from ..runtime.service import Service

declare = Declarations()


# --- inputs --------------------------------------------------------------------------------------


class RepoClone(Input):
    workspace_id: WorkspaceId
    repository: Repository
    ref: GitRef | None = Field(
        None, description="A branch, tag or commit (default: the remote's default branch)."
    )
    depth: int | None = Field(None, ge=1, le=1_000_000, description="Shallow clone depth.")
    destination: WorkspacePath | None = Field(None, description="Where to clone (default: REPO).")
    use_github_token: bool = Field(False, description="Authenticate with the configured token.")


_DESTINATION = "The repository's directory (default: the one cloned, its repo-path tag)."


class RepoFetch(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath | None = Field(None, description=_DESTINATION)
    ref: GitRef | None = Field(
        None, description="A branch, tag or commit (default: the remote's default branch)."
    )
    depth: int | None = Field(None, ge=1, le=1_000_000, description="Shallow fetch depth.")
    use_github_token: bool = Field(
        default=False, description="Authenticate with the configured token."
    )


class RepoCheckout(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath | None = Field(None, description=_DESTINATION)
    ref: GitRef
    create_branch: bool = Field(False, description="Create ref as a new branch at HEAD.")


class RepoStatusInput(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath | None = Field(None, description=_DESTINATION)


class RepoDiffInput(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath | None = Field(None, description=_DESTINATION)
    cached: bool = Field(False, description="Staged changes instead of the working tree.")
    stat: bool = Field(False, description="A diffstat instead of the patch.")
    max_bytes: int = Field(48_000, ge=1024, le=MAX_OUTPUT_BYTES, description="Cap on the output.")


# --- outputs -------------------------------------------------------------------------------------


class RepoOperation(Output):
    exec_id: str = Field(description="Follow it with workspace_realtime_exec_events.")
    operation: Literal["clone", "fetch", "checkout"] = Field(
        description="clone, fetch or checkout."
    )
    repository: str | None = Field(default=None, description="The canonical repository URL.")
    destination: str = Field(description="The repository's directory.")
    ref: str | None = Field(default=None, description="The branch, tag or commit asked for.")
    state: str = Field(description="The exec's state when it was started.")


class RepoStatusEntry(Output):
    path: str = Field(description="The path, relative to the repository.")
    index: str = Field(description="Staged status letter (. = unchanged, ? = untracked).")
    worktree: str = Field(description="Working-tree status letter.")
    orig_path: str | None = Field(
        default=None, description="The path it was renamed or copied from."
    )


class RepoStatus(Output):
    destination: str = Field(description="The repository's directory.")
    branch: str | None = Field(description="The current branch (null when detached).")
    head: str | None = Field(description="The commit HEAD points at.")
    upstream: str | None = Field(default=None, description="The upstream branch, if one is set.")
    ahead: int = Field(default=0, description="Commits ahead of upstream.")
    behind: int = Field(default=0, description="Commits behind upstream.")
    clean: bool = Field(description="Nothing is changed or untracked.")
    entries: list[RepoStatusEntry] = Field(description="Changed and untracked paths.")
    truncated: bool = Field(default=False, description="More paths changed than were returned.")


class RepoDiff(Output):
    destination: str = Field(description="The repository's directory.")
    cached: bool = Field(description="Staged changes rather than the working tree.")
    stat: bool = Field(description="A diffstat rather than the patch.")
    diff: str = Field(description="The diff text (its start when truncated).")
    truncated: bool = Field(description="The diff was cut to fit.")
    bytes: int = Field(description="Size of the whole diff.")


# --- operations ----------------------------------------------------------------------------------

log = logging.getLogger("modal_workspace_core.repo")


_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0"}


async def agent_paths(svc: Service, ws: str) -> tuple[str, str]:
    """The agent's own directory (where mirrors live) and its askpass program."""
    info, _ = await svc.request(ws, "ping", {})
    agent_dir, askpass = info.get("agent_dir"), info.get("askpass")
    if not isinstance(agent_dir, str) or not isinstance(askpass, str):
        raise UpstreamError(
            "this workspace's agent is older than the gateway and cannot run git operations: "
            "terminate the workspace and create a new one"
        )
    return agent_dir, askpass


async def _start(
    svc: Service, record: WorkspaceRecord, args: dict[str, Any], tags: dict[str, str]
) -> str:
    """Starts the exec of `args` and records `tags` in the background once it succeeds
    (`git.pending`: a restarted gateway finishes what this one could not)."""
    ws = record.workspace_id
    exec_id = str(args["exec_id"])
    if tags:
        args = {**args, "note": pending_note(tags)}
    await svc.request(ws, "exec.start", args)
    if tags:
        pending.track(svc, ws, svc.spawn(settle(svc, ws, exec_id, tags)))
    return exec_id


async def _start_network_git(
    svc: Service,
    record: WorkspaceRecord,
    *,
    mode: str,
    repo: policy.GitHubRepo,
    mirror: str,
    askpass: str,
    ref: str | None,
    depth: int | None,
    workspace_argv: list[str],
    use_token: bool,
    tags: dict[str, str],
) -> str:
    """The two-step exec of a clone or fetch (see the module's docstring)."""
    base = svc.settings.github_url
    url = repo.url_on(base)
    network: dict[str, Any] = {
        "identity": "agent",
        "argv": gitcmd.mirror_argv(mode, url, mirror, ref, depth, base),
        "env": gitcmd.mirror_env(askpass if use_token else None),
    }
    secrets: list[str] = []
    if use_token:
        # The token travels in this one request as the step's credential: the agent keeps it
        # and answers git's askpass with it for the base alone (no environment holds it), and
        # redacts it (and its encodings) from everything it records.
        # Minted for this operation: an App's token reads this one repository and nothing else.
        token = await credentials.for_workspace_git(
            svc, record, repo, credentials.FETCH, "use_github_token"
        )
        network["credential"] = {"base": gitcmd.base_origin(base), "token": token.token}
        secrets += token.redact
    workspace = {
        "argv": workspace_argv,
        "env": dict(gitcmd.WORKSPACE_STEP_ENV),
        "workdir": record.root,
    }
    args: dict[str, Any] = {"exec_id": policy.new_id("ex"), "steps": [network, workspace]}
    if secrets:
        args["secrets"] = secrets  # values to redact; they travel only in this request
    return await _start(svc, record, args, tags)


def _operation(exec_id: str, operation: str, dest: str, **extra: Any) -> RepoOperation:
    return RepoOperation.model_validate(
        {
            "exec_id": exec_id,
            "operation": operation,
            "destination": dest,
            "state": "running",
            **extra,
        }
    )


@declare(
    method="POST",
    path=WS + "/repo/clone",
    hints=NETWORK,
    summary="Clone a GitHub repository into the workspace as a realtime exec (git progress in its "
    "events).",
    limits="Follow exec_id with workspace_realtime_exec_events; repo tags are recorded after "
    "success.",
)
async def repo_clone(svc: Service, inp: RepoClone) -> RepoOperation:
    repo = policy.github_repo(inp.repository)
    dest = inp.destination or f"{WORKSPACE_ROOT}/{repo.name}"
    if dest == WORKSPACE_ROOT:
        raise InvalidArgumentError(
            "destination: clone into a directory below /workspace, not the root itself",
            field="destination",
        )
    record = await svc.record(inp.workspace_id)
    agent_dir, askpass = await agent_paths(svc, record.workspace_id)
    url = repo.url_on(svc.settings.github_url)
    mirror = gitcmd.mirror_path(agent_dir, dest)
    tags = {"repo-url": repo.url, "repo-path": dest}
    if inp.ref:
        tags["repo-ref"] = inp.ref
    exec_id = await _start_network_git(
        svc,
        record,
        mode="clone",
        repo=repo,
        mirror=mirror,
        askpass=askpass,
        ref=inp.ref,
        depth=inp.depth,
        workspace_argv=gitcmd.clone_from_mirror_argv(mirror, dest, inp.ref, inp.depth, url),
        use_token=inp.use_github_token,
        tags=tags,
    )
    return _operation(exec_id, "clone", dest, repository=repo.url, ref=inp.ref)


async def origin_repo(svc: Service, record: WorkspaceRecord, dest: str) -> policy.GitHubRepo:
    """The repository `dest` belongs to: the gateway's own record of the clone when it made
    it, else the repository's `origin`, read as untrusted input and held to the policy (so a
    rewritten origin can name only another repository on the configured base). That origin is
    the workspace's to name either way (its `.git/config`, or the output of the git that reads
    it, which its processes may write to)."""
    base = svc.settings.github_url
    if record.tags.get("repo-path") == dest and record.tags.get("repo-url"):
        return policy.github_repo(record.tags["repo-url"])
    argv = ["git", "-C", gitcmd.repo_dir(dest), "config", "--get", "remote.origin.url"]
    done = await git_query(svc, record, argv)
    if done.status.get("returncode") != 0:
        raise git_failure(done.stderr.text() or "no remote 'origin'", dest)
    origin = done.stdout.head.decode(errors="replace").strip()
    if origin.startswith(f"{base}/"):
        origin = origin[len(base) + 1 :]
    with core_refusal("destination", about="destination: its origin is not a GitHub repository"):
        return policy.github_repo(origin)


@declare(
    method="POST",
    path=WS + "/repo/fetch",
    hints=NETWORK,
    summary="Fetch from origin in a cloned repository as a realtime exec.",
)
async def repo_fetch(svc: Service, inp: RepoFetch) -> RepoOperation:
    record = await svc.record(inp.workspace_id)
    record, dest = await recorded_destination(svc, record, inp.destination)
    agent_dir, askpass = await agent_paths(svc, record.workspace_id)
    repo = await origin_repo(svc, record, dest)
    mirror = gitcmd.mirror_path(agent_dir, dest)
    tags = {"repo-fetched-at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    exec_id = await _start_network_git(
        svc,
        record,
        mode="fetch",
        repo=repo,
        mirror=mirror,
        askpass=askpass,
        ref=inp.ref,
        depth=inp.depth,
        workspace_argv=gitcmd.fetch_from_mirror_argv(mirror, dest, inp.ref, inp.depth),
        use_token=inp.use_github_token,
        tags=tags,
    )
    return _operation(exec_id, "fetch", dest, ref=inp.ref)


@declare(
    method="POST",
    path=WS + "/repo/checkout",
    hints=DESTROY,
    summary="Check out a branch, tag or commit in a cloned repository as a realtime exec.",
)
async def repo_checkout(svc: Service, inp: RepoCheckout) -> RepoOperation:
    record = await svc.record(inp.workspace_id)
    record, dest = await recorded_destination(svc, record, inp.destination)
    argv = gitcmd.checkout_argv(dest, inp.ref, inp.create_branch)
    tags = {"repo-ref": inp.ref} if record.tags.get("repo-path") == dest else {}
    args = exec_args(record, policy.new_id("ex"), argv=argv, env=dict(gitcmd.WORKSPACE_STEP_ENV))
    exec_id = await _start(svc, record, args, tags)
    return _operation(exec_id, "checkout", dest, ref=inp.ref)


# How long an operation defaulting to the cloned repository waits for a clone that has just
# ended to be recorded.
_RECORD_WAIT_SECONDS = 10.0


async def recorded_destination(
    svc: Service, record: WorkspaceRecord, given: str | None
) -> tuple[WorkspaceRecord, str]:
    """`destination_of`, once the repo records this process still owes the workspace (a clone
    whose stream has just ended) are written: a client that follows a clone to its end and
    then commits finds the clone on record. Returns the record as read then."""
    ws = record.workspace_id
    settling = given is None and "repo-path" not in record.tags
    if settling and await pending.settled(svc, ws, _RECORD_WAIT_SECONDS):
        svc.forget_record(ws)
        record = await svc.record(ws)
    return record, destination_of(record, given)


def destination_of(record: WorkspaceRecord, given: str | None) -> str:
    """The repository an operation acts on: the one named, else the one this workspace cloned
    (its `repo-path` tag, checked like a client's path)."""
    if given is not None:
        return given
    recorded = record.tags.get("repo-path")
    if recorded is None:
        raise InvalidArgumentError(
            "destination: this workspace has no cloned repository on record; clone one, or "
            "name the repository's directory",
            field="destination",
        )
    return policy.workspace_path(WORKSPACE_ROOT, recorded)


def git_failure(stderr: str, dest: str) -> WorkspaceError:
    if "not a git repository" in stderr or "cannot change to" in stderr or "can't cd" in stderr:
        return NotFoundError(f"destination: {dest} is not a git repository", field="destination")
    return UpstreamError(f"git failed: {stderr.strip()[-500:]}")


@declare(
    method="GET",
    path=WS + "/repo/status",
    hints=READ,
    summary="Show a repository's branch, upstream, ahead/behind and changed files.",
)
async def repo_status(svc: Service, inp: RepoStatusInput) -> RepoStatus:
    record = await svc.record(inp.workspace_id)
    record, dest = await recorded_destination(svc, record, inp.destination)
    done = await run_to_end(
        svc,
        record,
        argv=gitcmd.status_argv(dest),
        env={**_GIT_ENV, "GIT_OPTIONAL_LOCKS": "0"},
        timeout_seconds=120,
        cap=4 * 1024 * 1024,
        head_only=True,
        internal=True,
    )
    if done.status.get("returncode") != 0:
        raise git_failure(done.stderr.text(), dest)
    parsed = gitcmd.parse_status(done.stdout.head.decode(errors="replace"))
    if done.stdout.truncated:
        parsed["truncated"] = True
        parsed["clean"] = False
    return RepoStatus.model_validate({"destination": dest, **parsed})


@declare(
    method="GET",
    path=WS + "/repo/diff",
    hints=READ,
    summary=(
        "Show a repository's diff: working tree (untracked files as new) or staged with cached."
    ),
    limits="Output capped by max_bytes (truncated flag).",
    bounds={"actions": {"max_bytes": Bound(90_000)}},
)
async def repo_diff(svc: Service, inp: RepoDiffInput) -> RepoDiff:
    record = await svc.record(inp.workspace_id)
    record, dest = await recorded_destination(svc, record, inp.destination)
    done = await run_to_end(
        svc,
        record,
        argv=gitcmd.diff_argv(dest, inp.stat, inp.cached),
        env={**_GIT_ENV, "GIT_OPTIONAL_LOCKS": "0"},
        timeout_seconds=300,
        cap=inp.max_bytes,
        head_only=True,
        internal=True,
    )
    if done.status.get("returncode") != 0:
        raise git_failure(done.stderr.text(), dest)
    return RepoDiff(
        destination=dest,
        cached=inp.cached,
        stat=inp.stat,
        diff=done.stdout.head.decode(errors="replace"),
        truncated=done.stdout.truncated,
        bytes=done.stdout.total,
    )
