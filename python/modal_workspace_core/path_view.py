"""Paths as the commands of the workspace see them: in results, and in arguments on their way
to the agent (`host_path`).

The operations name files under `/workspace`, the root of every isolated workspace. An unisolated
local workspace runs its commands in a host directory instead, and reports that directory as its
`root`; its results then name that directory too, so every path a result names is one a command
there can open (and `models.WorkspacePath` takes it back as the same file).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .drivers.base import WorkspaceRecord
from .policy import WORKSPACE_ROOT

# The result fields that hold a path under the workspace root (`to`: where a patch moved a
# file). Others that say `path` are relative (to a repository, to the root in watch events) and
# never start with the root.
PATH_FIELDS = frozenset({"path", "destination", "to"})
# The managed tags that hold one (a workspace's description carries its own root).
PATH_TAGS = frozenset({"repo-path"})


def shown(result: BaseModel, root: str) -> BaseModel:
    """`result` with its `/workspace` paths under `root`, the root of the workspace it is of
    (a workspace's own description, also in a list, under the root it names)."""
    return _model(result, root)


def shown_path(path: str, root: str) -> str:
    """One `/workspace` path under `root`; any other text as it is."""
    root = root.rstrip("/")
    if root == WORKSPACE_ROOT:
        return path
    if path == WORKSPACE_ROOT:
        return root or "/"
    if path.startswith(WORKSPACE_ROOT + "/"):
        return root + path[len(WORKSPACE_ROOT) :]
    return path


def host_path(record: WorkspaceRecord, path: str) -> str:
    """A validated `/workspace/...` path as commands in this workspace see it: an argument on
    its way to the agent (`shown_path` does the same for results, and leaves other text be)."""
    return (
        record.root.rstrip("/") + path[len(WORKSPACE_ROOT) :]
        if path != WORKSPACE_ROOT
        else record.root
    )


def _model(model: BaseModel, root: str) -> BaseModel:
    fields = type(model).model_fields
    own_root = getattr(model, "root", None) if "tags" in fields else None
    if isinstance(own_root, str):
        tags = model.tags  # type: ignore[attr-defined]
        shown_tags = {k: shown_path(v, own_root) if k in PATH_TAGS else v for k, v in tags.items()}
        return model.model_copy(update={"tags": shown_tags}) if shown_tags != tags else model
    updates: dict[str, Any] = {}
    for name in fields:
        value = getattr(model, name)
        new = _value(value, root, name in PATH_FIELDS)
        if new is not value:
            updates[name] = new
    return model.model_copy(update=updates) if updates else model


def _value(value: Any, root: str, is_path: bool) -> Any:
    if isinstance(value, BaseModel):
        return _model(value, root)
    if isinstance(value, list):
        items = [_value(item, root, is_path=False) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if is_path and isinstance(value, str):
        return shown_path(value, root)
    return value
