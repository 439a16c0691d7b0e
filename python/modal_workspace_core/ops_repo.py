"""Handlers of git: clone, fetch and checkout as realtime execs of real git (progress in the
events), status and diff run to completion; repo tags recorded only after success.

A GitHub token reaches git only through a GIT_ASKPASS script that reads it from the one exec's
environment, put there by the gateway (local driver) or by the agent from the workspace's private
environment (Modal); either way the agent redacts it from every event.
"""

from __future__ import annotations

import logging
import posixpath
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
from .models import relative as rel
from .ops_execs import exec_args, run_to_end
from .repo_pending import GATEWAY_DIR, pending_path, record_pending, remove_quietly, settle
from .results import RepoDiff, RepoOperation, RepoStatus

if TYPE_CHECKING:
    from .drivers.base import WorkspaceRecord
    from .service_core import Service

log = logging.getLogger("modal_workspace_core.repo")
_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0"}


async def _start_git(
    svc: Service,
    record: WorkspaceRecord,
    argv: list[str],
    *,
    use_token: bool,
    tags: dict[str, str],
) -> str:
    """Starts `argv` as a realtime exec and records `tags` in the background once it succeeds
    (`repo_pending`: a restarted gateway finishes what this one could not)."""
    ws = record.workspace_id
    exec_id = policy.new_id("ex")
    env = dict(_GIT_ENV)
    secrets: list[str] = []
    askpass: str | None = None
    secret_env: dict[str, str] = {}
    if use_token:
        # The driver says how the token reaches this exec: as a value the gateway holds, or
        # copied by the agent from the workspace's own (private) environment.
        token = svc.github_token(gitcmd.TOKEN_ENV)
        askpass = f"{GATEWAY_DIR}/askpass-{exec_id}"
        args = {"path": askpass, "create_parents": True}
        await svc.request(ws, "file.write", args, gitcmd.ASKPASS_SCRIPT.encode())
        argv = gitcmd.with_askpass(argv, posixpath.join(record.root, askpass))
        env["GIT_ASKPASS"] = posixpath.join(record.root, askpass)
        env.update(token.env)
        secrets += token.redact
        secret_env = token.agent_env
    args = exec_args(record, exec_id, argv=argv, env=env, secrets=secrets)
    if secret_env:
        args["secret_env"] = secret_env
    try:
        await record_pending(svc, ws, exec_id, tags, askpass)
        await svc.request(ws, "exec.start", args)
    except WorkspaceError:
        if askpass:
            await remove_quietly(svc, ws, askpass)
        await remove_quietly(svc, ws, pending_path(exec_id))
        raise
    svc.spawn(settle(svc, ws, exec_id, tags, askpass))
    return exec_id


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
    argv = gitcmd.clone_argv(repo.url_on(svc.settings.github_url), rel(dest), inp.ref, inp.depth)
    tags = {"repo-url": repo.url, "repo-path": dest}
    if inp.ref:
        tags["repo-ref"] = inp.ref
    exec_id = await _start_git(svc, record, argv, use_token=inp.use_github_token, tags=tags)
    return _operation(exec_id, "clone", dest, repository=repo.url, ref=inp.ref)


async def repo_fetch(svc: Service, inp: RepoFetch) -> RepoOperation:
    record = await svc.record(inp.workspace_id)
    argv = gitcmd.fetch_argv(rel(inp.destination), inp.ref, inp.depth)
    tags = {"repo-fetched-at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    exec_id = await _start_git(svc, record, argv, use_token=inp.use_github_token, tags=tags)
    return _operation(exec_id, "fetch", inp.destination, ref=inp.ref)


async def repo_checkout(svc: Service, inp: RepoCheckout) -> RepoOperation:
    record = await svc.record(inp.workspace_id)
    argv = gitcmd.checkout_argv(rel(inp.destination), inp.ref, inp.create_branch)
    tags = {"repo-ref": inp.ref} if record.tags.get("repo-path") == inp.destination else {}
    exec_id = await _start_git(svc, record, argv, use_token=False, tags=tags)
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
        argv=gitcmd.status_argv(rel(inp.destination)),
        env={**_GIT_ENV, "GIT_OPTIONAL_LOCKS": "0"},
        timeout_seconds=120,
        cap=4 * 1024 * 1024,
        head_only=True,
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
        argv=gitcmd.diff_argv(rel(inp.destination), inp.stat, inp.cached),
        env={**_GIT_ENV, "GIT_OPTIONAL_LOCKS": "0"},
        timeout_seconds=300,
        cap=inp.max_bytes,
        head_only=True,
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
