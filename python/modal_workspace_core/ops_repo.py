"""Handlers of git: clone, fetch and checkout as realtime execs of real git (progress in the
events), status and diff run to completion; repo tags recorded only after success.

A clone or fetch is one exec of two steps (`gitcmd`): the network step runs as the agent, with
a fixed environment and configuration the workspace does not control, fetching the canonical
URL on the configured GitHub base into a mirror in the agent's own directory; only this step
may hold the GitHub token, which reaches git through the package's askpass program, for the
base's host alone. The workspace step then clones or fetches from the mirror, with no token.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from . import gitcmd, policy
from .errors import InvalidArgumentError, NotFoundError, UpstreamError, WorkspaceError
from .models import (
    WORKSPACE_ROOT,
    RepoCheckout,
    RepoClone,
    RepoDiffInput,
    RepoFetch,
    RepoStatusInput,
)
from .ops_execs import exec_args, run_to_end
from .repo_pending import pending_note, settle
from .results import RepoDiff, RepoOperation, RepoStatus

if TYPE_CHECKING:
    from .drivers.base import WorkspaceRecord
    from .service_core import Service

log = logging.getLogger("modal_workspace_core.repo")
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0"}
# The name the token is fetched under for the network step's credential (never an env name).
CREDENTIAL_ENV = "MWC_GIT_TOKEN"


async def _agent_paths(svc: Service, ws: str) -> tuple[str, str]:
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
    (`repo_pending`: a restarted gateway finishes what this one could not)."""
    ws = record.workspace_id
    exec_id = str(args["exec_id"])
    if tags:
        args = {**args, "note": pending_note(tags)}
    await svc.request(ws, "exec.start", args)
    if tags:
        svc.spawn(settle(svc, ws, exec_id, tags))
    return exec_id


async def _start_network_git(
    svc: Service,
    record: WorkspaceRecord,
    *,
    mode: str,
    url: str,
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
        token = svc.github_token(CREDENTIAL_ENV)
        network["credential"] = {
            "base": gitcmd.base_origin(base),
            "token": token.env[CREDENTIAL_ENV],
        }
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


async def repo_clone(svc: Service, inp: RepoClone) -> RepoOperation:
    repo = policy.github_repo(inp.repository)
    dest = inp.destination or f"{WORKSPACE_ROOT}/{repo.name}"
    if dest == WORKSPACE_ROOT:
        raise InvalidArgumentError(
            "destination: clone into a directory below /workspace, not the root itself",
            field="destination",
        )
    record = await svc.record(inp.workspace_id)
    agent_dir, askpass = await _agent_paths(svc, record.workspace_id)
    url = repo.url_on(svc.settings.github_url)
    mirror = gitcmd.mirror_path(agent_dir, dest)
    tags = {"repo-url": repo.url, "repo-path": dest}
    if inp.ref:
        tags["repo-ref"] = inp.ref
    exec_id = await _start_network_git(
        svc,
        record,
        mode="clone",
        url=url,
        mirror=mirror,
        askpass=askpass,
        ref=inp.ref,
        depth=inp.depth,
        workspace_argv=gitcmd.clone_from_mirror_argv(mirror, dest, inp.ref, inp.depth, url),
        use_token=inp.use_github_token,
        tags=tags,
    )
    return _operation(exec_id, "clone", dest, repository=repo.url, ref=inp.ref)


async def _fetch_url(svc: Service, record: WorkspaceRecord, dest: str) -> str:
    """The canonical URL to fetch `dest` from: the gateway's own record of the clone when it
    made it, else the repository's `origin`, read as untrusted input and held to the policy
    (so a rewritten origin can name only another repository on the configured base)."""
    base = svc.settings.github_url
    if record.tags.get("repo-path") == dest and record.tags.get("repo-url"):
        return policy.github_repo(record.tags["repo-url"]).url_on(base)
    done = await run_to_end(
        svc,
        record,
        argv=["git", "-C", gitcmd.repo_dir(dest), "config", "--get", "remote.origin.url"],
        env={**_GIT_ENV, "GIT_OPTIONAL_LOCKS": "0"},
        timeout_seconds=60,
        cap=4096,
        head_only=True,
        internal=True,
    )
    if done.status.get("returncode") != 0:
        raise _git_failure(done.stderr.text() or "no remote 'origin'", dest)
    origin = done.stdout.head.decode(errors="replace").strip()
    if origin.startswith(f"{base}/"):
        origin = origin[len(base) + 1 :]
    try:
        return policy.github_repo(origin).url_on(base)
    except policy.PolicyError as exc:
        raise InvalidArgumentError(
            f"destination: its origin is not a GitHub repository ({exc})", field="destination"
        ) from None


async def repo_fetch(svc: Service, inp: RepoFetch) -> RepoOperation:
    record = await svc.record(inp.workspace_id)
    dest = inp.destination
    agent_dir, askpass = await _agent_paths(svc, record.workspace_id)
    url = await _fetch_url(svc, record, dest)
    mirror = gitcmd.mirror_path(agent_dir, dest)
    tags = {"repo-fetched-at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    exec_id = await _start_network_git(
        svc,
        record,
        mode="fetch",
        url=url,
        mirror=mirror,
        askpass=askpass,
        ref=inp.ref,
        depth=inp.depth,
        workspace_argv=gitcmd.fetch_from_mirror_argv(mirror, dest, inp.ref, inp.depth),
        use_token=inp.use_github_token,
        tags=tags,
    )
    return _operation(exec_id, "fetch", inp.destination, ref=inp.ref)


async def repo_checkout(svc: Service, inp: RepoCheckout) -> RepoOperation:
    record = await svc.record(inp.workspace_id)
    argv = gitcmd.checkout_argv(inp.destination, inp.ref, inp.create_branch)
    tags = {"repo-ref": inp.ref} if record.tags.get("repo-path") == inp.destination else {}
    args = exec_args(record, policy.new_id("ex"), argv=argv, env=dict(gitcmd.WORKSPACE_STEP_ENV))
    exec_id = await _start(svc, record, args, tags)
    return _operation(exec_id, "checkout", inp.destination, ref=inp.ref)


def _git_failure(stderr: str, dest: str) -> WorkspaceError:
    if "not a git repository" in stderr or "cannot change to" in stderr or "can't cd" in stderr:
        return NotFoundError(f"destination: {dest} is not a git repository", field="destination")
    return UpstreamError(f"git failed: {stderr.strip()[-500:]}")


async def repo_status(svc: Service, inp: RepoStatusInput) -> RepoStatus:
    record = await svc.record(inp.workspace_id)
    done = await run_to_end(
        svc,
        record,
        argv=gitcmd.status_argv(inp.destination),
        env={**_GIT_ENV, "GIT_OPTIONAL_LOCKS": "0"},
        timeout_seconds=120,
        cap=4 * 1024 * 1024,
        head_only=True,
        internal=True,
    )
    if done.status.get("returncode") != 0:
        raise _git_failure(done.stderr.text(), inp.destination)
    parsed = gitcmd.parse_status(done.stdout.head.decode(errors="replace"))
    if done.stdout.truncated:
        parsed["truncated"] = True
        parsed["clean"] = False
    return RepoStatus.model_validate({"destination": inp.destination, **parsed})


async def repo_diff(svc: Service, inp: RepoDiffInput) -> RepoDiff:
    record = await svc.record(inp.workspace_id)
    done = await run_to_end(
        svc,
        record,
        argv=gitcmd.diff_argv(inp.destination, inp.stat, inp.cached),
        env={**_GIT_ENV, "GIT_OPTIONAL_LOCKS": "0"},
        timeout_seconds=300,
        cap=inp.max_bytes,
        head_only=True,
        internal=True,
    )
    if done.status.get("returncode") != 0:
        raise _git_failure(done.stderr.text(), inp.destination)
    return RepoDiff(
        destination=inp.destination,
        cached=inp.cached,
        stat=inp.stat,
        diff=done.stdout.head.decode(errors="replace"),
        truncated=done.stdout.truncated,
        bytes=done.stdout.total,
    )
