"""The published OpenAPI documents: `/openapi.json` (everything) and the GPT Actions schema,
`/action-openapi.json`, cut to what Actions accepts.

GPT Actions takes at most 30 operations, descriptions of at most 300 characters and parameter
descriptions of at most 700; these limits are enforced here and asserted by the tests.
"""

from __future__ import annotations

import copy
from collections.abc import Collection
from typing import Any

from ...operations import OPERATIONS

__all__ = [
    "ERROR_STATUSES",
    "MAX_ACTIONS_OPERATIONS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_PARAMETER_DESCRIPTION_CHARS",
    "actions_schema",
    "full_schema",
]

MAX_ACTIONS_OPERATIONS = 30
MAX_DESCRIPTION_CHARS = 300
MAX_PARAMETER_DESCRIPTION_CHARS = 700

ERROR_STATUSES: dict[int | str, str] = {
    400: "Invalid argument: the message names the field.",
    401: "Missing or invalid bearer token.",
    403: "Not permitted (for example a secret outside the allowlist).",
    404: "No such workspace, exec, watch or path.",
    409: "Conflicts with the current state.",
    413: "Too large.",
    429: "Too many.",
    502: "The workspace or its provider failed.",
    504: "The workspace did not answer in time.",
}

_SECURITY_SCHEMES = {"bearerAuth": {"type": "http", "scheme": "bearer"}}
_CONSEQUENTIAL = {op.name: op.hints.consequential for op in OPERATIONS}


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def full_schema(raw: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's document with our error model instead of its 422, and the bearer scheme."""
    schema = copy.deepcopy(raw)
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            if isinstance(operation, dict):
                operation.get("responses", {}).pop("422", None)
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    schema["components"]["securitySchemes"] = _SECURITY_SCHEMES
    schema["security"] = [{"bearerAuth": []}]
    return schema


def _referenced(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            found.add(ref.rsplit("/", 1)[1])
        for value in node.values():
            _referenced(value, found)
    elif isinstance(node, list):
        for value in node:
            _referenced(value, found)


def _clip_descriptions(node: Any, limit: int) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("description"), str):
            node["description"] = _clip(node["description"], limit)
        for value in node.values():
            _clip_descriptions(value, limit)
    elif isinstance(node, list):
        for value in node:
            _clip_descriptions(value, limit)


_RAW_TEXT_FIELDS = {op.name: op.raw.text_field for op in OPERATIONS if op.raw and op.raw.text_field}


def _text_form_only(op: dict[str, Any]) -> None:
    """The field of a raw route that selects its text form, required and true."""
    field = _RAW_TEXT_FIELDS.get(op.get("operationId", ""))
    for param in op.get("parameters", []):
        if field is not None and param.get("name") == field:
            param["required"] = True
            param["schema"] = {**param.get("schema", {}), "enum": [True], "default": True}


def actions_schema(
    full: dict[str, Any], server_url: str, wanted: Collection[str] | None = None
) -> dict[str, Any]:
    """The GPT Actions document: only the operations `wanted` there (by default those marked for
    Actions; the gateway's settings may swap some, `operations.actions_operations`), within its
    limits, with `servers` set to the URL the client used."""
    if wanted is None:
        wanted = {op.name for op in OPERATIONS if op.in_actions}
    paths: dict[str, Any] = {}
    for path, item in full.get("paths", {}).items():
        kept = {
            method: copy.deepcopy(op)
            for method, op in item.items()
            if isinstance(op, dict) and op.get("operationId") in wanted
        }
        for op in kept.values():
            # Said of every operation: without it, GPT Actions takes every operation but a GET
            # as consequential and asks the user before each call, with no "always allow".
            op["x-openai-isConsequential"] = _CONSEQUENTIAL[op["operationId"]]
            op["summary"] = _clip(op.get("summary", ""), MAX_DESCRIPTION_CHARS)
            op["description"] = _clip(op.get("description", ""), MAX_DESCRIPTION_CHARS)
            for param in op.get("parameters", []):
                _clip_descriptions(param, MAX_PARAMETER_DESCRIPTION_CHARS)
            # Actions take text only: a route that can also answer bytes is documented there
            # by its JSON answer alone, and asks for it always.
            _text_form_only(op)
            for response in op.get("responses", {}).values():
                content = response.get("content") if isinstance(response, dict) else None
                if isinstance(content, dict) and "application/json" in content:
                    response["content"] = {"application/json": content["application/json"]}
        if kept:
            paths[path] = kept
    schemas = copy.deepcopy(full.get("components", {}).get("schemas", {}))
    _clip_descriptions(schemas, MAX_PARAMETER_DESCRIPTION_CHARS)
    # Keep only the schemas the kept operations reach, following references transitively.
    needed: set[str] = set()
    _referenced(paths, needed)
    frontier = set(needed)
    while frontier:
        found: set[str] = set()
        _referenced([schemas[n] for n in frontier if n in schemas], found)
        frontier = found - needed
        needed |= found
    info = dict(full.get("info", {}))
    info["description"] = _clip(
        "Remote workspaces for AI agents: create one, clone a GitHub repository, run commands "
        "with live output (realtime execs: loop on events until done), edit files, see the diff.",
        MAX_DESCRIPTION_CHARS,
    )
    return {
        "openapi": full.get("openapi", "3.1.0"),
        "info": info,
        "servers": [{"url": server_url}],
        "paths": paths,
        "components": {
            "schemas": {name: schemas[name] for name in sorted(needed) if name in schemas},
            "securitySchemes": _SECURITY_SCHEMES,
        },
        "security": [{"bearerAuth": []}],
    }
