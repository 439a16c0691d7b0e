"""Git that reaches a repository over the network from inside a workspace: always an agent step
(the agent's identity, a fixed environment, outside `/workspace`), the only git that may hold a
GitHub token, which reaches it as the step's credential through the agent's askpass. Shared: the
repo domain clones and fetches with it, a template's build clones with it, and the sweep asks a
template's remote where its branch is."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import UpstreamError
from ..git import commands as gitcmd
from ..git import credentials

if TYPE_CHECKING:
    from ..drivers.base import WorkspaceRecord
    from ..policy import GitHubRepo
    from ..runtime.service import Service

__all__ = ["agent_paths", "network_step"]


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


async def network_step(
    svc: Service,
    record: WorkspaceRecord,
    repo: GitHubRepo,
    argv: list[str],
    *,
    askpass: str,
    use_token: bool,
    report: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """The agent step that runs `argv` against `repo`, and the values the exec must redact.

    With `use_token`, a token minted for this step alone (an App's reads this one repository)
    travels as the step's credential: the agent keeps it, answers git's askpass with it for the
    configured base alone (no environment holds it) and redacts it from everything it records.
    With `report`, the step has the exec's report channel (descriptor 3), the one output no
    process of the workspace can write to."""
    step: dict[str, Any] = {
        "identity": "agent",
        "argv": argv,
        "env": gitcmd.mirror_env(askpass if use_token else None),
    }
    if report:
        step["report"] = True
    if not use_token:
        return step, []
    token = await credentials.for_workspace_git(
        svc, record, repo, credentials.FETCH, "use_github_token"
    )
    step["credential"] = {"base": gitcmd.base_origin(svc.settings.github_url), "token": token.token}
    return step, token.redact
