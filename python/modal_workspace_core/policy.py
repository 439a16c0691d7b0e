"""The input policies: every rule that decides whether a client's input is safe.

The rules live in the compiled core; this module is their public Python name. Each function
returns the input in canonical form or raises `modal_workspace_core.PolicyError`, whose `rule`
attribute names the rule that failed (for example `"repo.userinfo"` or `"tag.managed"`). The
managed tag names live in the core too (`MANAGED_TAGS`, `MANAGED_TAG_PREFIXES`,
`WORKSPACE_TAGS`): read them from here, never spell them again.
"""

from ._core import (
    IDEMPOTENCY_TAG,
    MANAGED_TAG_PREFIXES,
    MANAGED_TAGS,
    MAX_IMAGE_PACKAGES,
    MAX_TAGS,
    WORKSPACE_TAGS,
    GitHubRepo,
    PolicyError,
    allowed,
    caller_tags,
    check_id,
    env_name,
    git_ref,
    github_base,
    github_repo,
    idempotency_key,
    image_id,
    image_name,
    image_packages,
    name_allowlist,
    new_id,
    secret_allowlist,
    snapshot_label,
    stored_tag,
    volume_mount,
    workspace_path,
)

# Where a workspace's files are, as every client and (isolated) command sees them.
WORKSPACE_ROOT = "/workspace"

__all__ = [
    "IDEMPOTENCY_TAG",
    "MANAGED_TAGS",
    "MANAGED_TAG_PREFIXES",
    "MAX_IMAGE_PACKAGES",
    "MAX_TAGS",
    "WORKSPACE_TAGS",
    "GitHubRepo",
    "PolicyError",
    "allowed",
    "caller_tags",
    "check_id",
    "env_name",
    "git_ref",
    "github_base",
    "github_repo",
    "idempotency_key",
    "image_id",
    "image_name",
    "image_packages",
    "name_allowlist",
    "new_id",
    "secret_allowlist",
    "snapshot_label",
    "stored_tag",
    "volume_mount",
    "workspace_path",
]
