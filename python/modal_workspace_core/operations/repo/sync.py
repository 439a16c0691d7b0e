"""Bringing a repository into the workspace and moving it between refs: clone, fetch and
checkout, each a realtime exec the client follows. A clone or fetch is two steps: the agent's
git fills a mirror of its own over the network (with the token, when asked, through its
askpass), then the workspace's git takes from the mirror. Git's commands are built in
`git.commands`; the repository tags are recorded when the exec ends well (`git.pending`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ... import policy
from ...errors import InvalidArgumentError
from ...git import commands as gitcmd
from ...git import pending
from ...git.pending import pending_note, settle
from ...policy import WORKSPACE_ROOT
from ..exec_engine import exec_args
from ..machinery.fields import GitRef, Input, Output, Repository, WorkspaceId, WorkspacePath
from ..machinery.table import NETWORK, REWRITE, WS, Declarations
from ..network_git import agent_paths, network_step
from .repository import DESTINATION, origin_repo, recorded_destination

if TYPE_CHECKING:
    from ...drivers.base import WorkspaceRecord
    from ...runtime.service import Service

declare = Declarations()


# --- inputs --------------------------------------------------------------------------------------


class RepoClone(Input):
    workspace_id: WorkspaceId
    repository: Repository
    ref: GitRef | None = Field(None, description="Default: the remote's default branch.")
    depth: int | None = Field(None, ge=1, le=1_000_000, description="Shallow.")
    destination: WorkspacePath | None = Field(None, description="Default: REPO.")
    use_github_token: bool = Field(False, description="Use the gateway's GitHub token.")


class RepoFetch(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath | None = Field(None, description=DESTINATION)
    ref: GitRef | None = Field(None, description="Default: the remote's default branch.")
    depth: int | None = Field(None, ge=1, le=1_000_000, description="Shallow.")
    use_github_token: bool = Field(default=False, description="Use the gateway's GitHub token.")


class RepoCheckout(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath | None = Field(None, description=DESTINATION)
    ref: GitRef
    create_branch: bool = Field(False, description="ref is a new branch at HEAD.")


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


# --- operations ----------------------------------------------------------------------------------


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
    argv = gitcmd.mirror_argv(mode, repo.url_on(base), mirror, ref, depth, base)
    network, secrets = await network_step(
        svc, record, repo, argv, askpass=askpass, use_token=use_token
    )
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
    summary="Clone a GitHub repository as a realtime exec.",
    limits="Follow exec_id with stream_events.",
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


@declare(
    method="POST",
    path=WS + "/repo/fetch",
    hints=NETWORK,
    summary="Fetch from origin as a realtime exec: follow exec_id.",
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
    hints=REWRITE,
    summary="Check out a ref as a realtime exec: follow exec_id.",
)
async def repo_checkout(svc: Service, inp: RepoCheckout) -> RepoOperation:
    record = await svc.record(inp.workspace_id)
    record, dest = await recorded_destination(svc, record, inp.destination)
    argv = gitcmd.checkout_argv(dest, inp.ref, inp.create_branch)
    tags = {"repo-ref": inp.ref} if record.tags.get("repo-path") == dest else {}
    args = exec_args(record, policy.new_id("ex"), argv=argv, env=dict(gitcmd.WORKSPACE_STEP_ENV))
    exec_id = await _start(svc, record, args, tags)
    return _operation(exec_id, "checkout", dest, ref=inp.ref)
