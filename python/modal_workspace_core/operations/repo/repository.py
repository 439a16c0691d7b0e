"""The repository a repo operation acts on, and what every repo module shares: its directory
(the one named, else the clone on record), its GitHub origin, git's failures as errors, and the
managed tag of the branch pushed last (the agent's mirror directory and askpass are
`network_git`'s). The other repo modules import this one; it imports none of them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import policy
from ...errors import (
    InvalidArgumentError,
    NotFoundError,
    UpstreamError,
    WorkspaceError,
    core_refusal,
)
from ...git import commands as gitcmd
from ...git import pending
from ...policy import WORKSPACE_ROOT
from ..exec_engine import git_query

if TYPE_CHECKING:
    from ...drivers.base import WorkspaceRecord
    from ...runtime.service import Service

__all__ = [
    "DESTINATION",
    "LAST_PUSH_TAG",
    "destination_of",
    "git_failure",
    "origin_repo",
    "recorded_destination",
]

# What a repo operation's `destination` field says.
DESTINATION = "The repository (default: the one cloned)."
# The managed tag naming the branch this workspace pushed last: a pull request's default head.
LAST_PUSH_TAG = "repo-pushed-branch"


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
    """Git's failure on the repository at `dest` as a caller sees it: no repository there is
    `not_found` (naming the destination), anything else `upstream` with the end of git's words."""
    if "not a git repository" in stderr or "cannot change to" in stderr or "can't cd" in stderr:
        return NotFoundError(f"destination: {dest} is not a git repository", field="destination")
    return UpstreamError(f"git failed: {stderr.strip()[-500:]}")
