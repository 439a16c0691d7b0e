"""What a repository holds now, read by git the gateway runs in the workspace (out of the
workspace's exec list, taking no lock): its status (branch, upstream, ahead and behind, the
changed paths) and its diff."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from ...git import commands as gitcmd
from ..exec_engine import run_to_end
from ..machinery.fields import MAX_OUTPUT_BYTES, Input, Output, WorkspaceId, WorkspacePath
from ..machinery.fitting import KeepFirst, KeepStart
from ..machinery.limits import Bound
from ..machinery.table import READ, WS, Declarations
from .repository import DESTINATION, git_failure, recorded_destination

if TYPE_CHECKING:
    from ...runtime.service import Service

declare = Declarations()


# --- inputs --------------------------------------------------------------------------------------


class RepoStatusInput(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath | None = Field(None, description=DESTINATION)


class RepoDiffInput(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath | None = Field(None, description=DESTINATION)
    cached: bool = Field(False, description="Staged, not the working tree.")
    stat: bool = Field(False, description="A diffstat, not the patch.")
    max_bytes: int = Field(48_000, ge=1024, le=MAX_OUTPUT_BYTES, description="Cap.")


# --- outputs -------------------------------------------------------------------------------------


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

    gives_less = (KeepFirst("entries"),)


class RepoDiff(Output):
    destination: str = Field(description="The repository's directory.")
    cached: bool = Field(description="Staged changes rather than the working tree.")
    stat: bool = Field(description="A diffstat rather than the patch.")
    diff: str = Field(description="The diff text (its start when truncated).")
    truncated: bool = Field(description="The diff was cut to fit.")
    bytes: int = Field(description="Size of the whole diff.")

    gives_less = (KeepStart("diff"),)


# --- operations ----------------------------------------------------------------------------------

_GIT_ENV = {"GIT_TERMINAL_PROMPT": "0"}


@declare(
    method="GET",
    path=WS + "/repo/status",
    hints=READ,
    summary="Show a repository's branch, upstream and changed files.",
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
    summary=("Show a repository's diff: working tree (untracked as new) or staged."),
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
