"""Who runs a workspace's processes, on every driver: its commands as an unprivileged user of
their own, the agent's git steps (the only processes that ever hold a GitHub token) as another,
and neither as the agent. On Modal, where the agent is the sandbox's root, commands may be root
instead by the workspace's own choice (`resources.run_as_root`), and such a workspace is never
handed a token (`git.credentials.for_workspace_git`): a root command could read it from the git
step's memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "AGENT_GIT_UID",
    "COMMAND_HOME",
    "COMMAND_UID",
    "COMMAND_USER_NAME",
    "RUN_AS_ROOT",
    "commands_run_as_root",
]

# The uid (and gid) of the workspace's commands, and of the agent's own git steps.
COMMAND_UID = 1000
AGENT_GIT_UID = 1001
COMMAND_USER_NAME = "workspace"
# A home of the workspace's own: tools that write to `~` (pip --user, caches) work and keep
# their files across suspends and forks.
COMMAND_HOME = "/home/workspace"
# The resource that chooses root commands (Modal), as records keep it.
RUN_AS_ROOT = "run_as_root"


def commands_run_as_root(resources: Mapping[str, Any]) -> bool:
    """Whether a workspace's recorded resources say its commands run as root."""
    return resources.get(RUN_AS_ROOT) is True
