"""The input policies: every rule that decides whether a client's input is safe.

The rules live in the compiled core; this module is their public Python name. Each function
returns the input in canonical form or raises `modal_workspace_core.PolicyError`, whose `rule`
attribute names the rule that failed (for example `"repo.userinfo"` or `"ref.double-dot"`).
"""

from ._core import (
    GitHubRepo,
    PolicyError,
    allowed,
    check_id,
    env_name,
    git_ref,
    github_repo,
    new_id,
    workspace_path,
)

__all__ = [
    "GitHubRepo",
    "PolicyError",
    "allowed",
    "check_id",
    "env_name",
    "git_ref",
    "github_repo",
    "new_id",
    "workspace_path",
]
