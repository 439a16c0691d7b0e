"""The JSON Schemas of MCP tools, as short as they can be while complete: a host pays for every
byte of `tools/list` in every conversation, before the first call.

An input schema keeps what a caller needs to build a call: types, bounds, defaults and each
field's description, less what a client learns nothing from: titles (the field's name again),
`"default": null` and the null branch of an optional field (leaving it out means the same), and
the description and pattern of an id the agent was handed (`SELF_EVIDENT`): the server checks it
and its refusal names the field. What several tools' inputs share is said once
(`InputSchemas`): a model inside them given whole by the first tool that takes it and referred
to after, as an answer's is, and a field they take alike described by the first.

An output schema is the answer's shape, for the client that validates structured content:
each field's type, nullability included, and enums. It lists no required fields: pydantic's
list is the fields without a default, while an answer carries every field (the few left out
when null are said where they are). Hosts show a model a tool's name, description and input
schema, so what an agent must know of an answer is said in the tool's description
(`Operation.description`); the REST schema keeps every field's description. A model answered by
several tools is given whole once and referred to after ("As in workspace_create."), and the
field any answer may carry (`EVERY_ANSWER`) is said once, in the server's instructions. Every
answer that validated against the model's schema validates against its tool's.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel

__all__ = ["EVERY_ANSWER", "SELF_EVIDENT", "InputSchemas", "OutputSchemas", "input_schema"]

# The field any answer may carry (`Output.resumed_from`).
EVERY_ANSWER = "resumed_from"
# The ids a call acts on, which an agent passes as it was handed them: their names say what they
# are. (The REST schema describes them and gives their patterns: GPT Actions wants every
# parameter described.)
SELF_EVIDENT = frozenset({"workspace_id", "exec_id", "watch_id", "snapshot_id"})

Side = Literal["input", "output"]

_NULL = {"type": "null"}
# Keywords that would exclude null if null were allowed beside them: a schema with one keeps
# its `anyOf`.
_EXCLUDES_NULL = frozenset({"enum", "const", "$ref", "anyOf", "oneOf", "allOf"})


def input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model`'s JSON Schema as a tool's `inputSchema`, whole."""
    schema = _schema(model, "input")
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        if name in SELF_EVIDENT and name in required:
            prop.pop("description", None)
            prop.pop("pattern", None)
    return schema


class InputSchemas:
    """The input schemas of one tool list, each said once: a model inside several tools' inputs
    (a workspace's `Resources`: workspace_create's, template_create's) is given whole by the
    first tool that takes it and referred to by the others, as answers are (`OutputSchemas`);
    a field several tools take alike (the same name, type, bounds and description: a file's
    `path`, a page's `cursor`) is described by the first that takes it, and the others give its
    type and bounds. The server checks every field whichever tool it came with, and its refusal
    names the field."""

    def __init__(self) -> None:
        self._first: dict[str, str] = {}

    def __call__(self, model: type[BaseModel], tool: str) -> dict[str, Any]:
        schema = input_schema(model)
        for name, definition in schema.get("$defs", {}).items():
            if self._given(f"model {name}", definition, tool) != tool:
                schema["$defs"][name] = _pointer(self._given(f"model {name}", definition, tool))
        for name, prop in schema.get("properties", {}).items():
            if "description" in prop and self._given(f"field {name}", prop, tool) != tool:
                del prop["description"]
        return schema

    def _given(self, what: str, shape: dict[str, Any], tool: str) -> str:
        """The tool that gives `what` with this shape: `tool` the first time it is seen."""
        return self._first.setdefault(f"{what}:{json.dumps(shape, sort_keys=True)}", tool)


class OutputSchemas:
    """The output schemas of one tool list: each model's shape given whole by the first tool
    that answers it (an answer, or a model inside one), and referred to by the others. Several
    tools answer a workspace, an exec's status or a page of events."""

    def __init__(self) -> None:
        self._first: dict[str, str] = {}

    def __call__(self, model: type[BaseModel], tool: str) -> dict[str, Any]:
        schema = _schema(model, "output")
        _undescribe(schema)
        first = self._given(model.__name__, schema, tool)
        if first != tool:
            return _pointer(first)
        definitions = schema.get("$defs", {})
        for name, definition in definitions.items():
            first = self._given(name, definition, tool)
            if first != tool:
                definitions[name] = _pointer(first)
        _drop_unreferenced(schema)
        return schema

    def _given(self, name: str, definition: dict[str, Any], tool: str) -> str:
        """The tool that gives this model whole: `tool` the first time it is seen."""
        shape = {k: v for k, v in definition.items() if k != "$defs"}
        return self._first.setdefault(f"{name}:{json.dumps(shape, sort_keys=True)}", tool)


def _pointer(tool: str) -> dict[str, Any]:
    return {"type": "object", "description": f"As in {tool}."}


def _schema(model: type[BaseModel], side: Side) -> dict[str, Any]:
    schema = model.model_json_schema()
    definitions = schema.get("$defs", {}).values()
    for node in (schema, *definitions):
        # A model's docstring is written for the code's readers.
        node.pop("description", None)
        if side == "output":
            node.get("properties", {}).pop(EVERY_ANSWER, None)
    _compact(schema, side)
    return schema


def _compact(node: Any, side: Side) -> None:
    if isinstance(node, list):
        for item in node:
            _compact(item, side)
        return
    if not isinstance(node, dict):
        return
    # A `title` keyword is a string; a property named "title" is a schema (a dict): kept.
    if isinstance(node.get("title"), str):
        del node["title"]
    if node.get("additionalProperties") is True or (
        side == "input" and node.get("additionalProperties") is False
    ):
        # True is the default; an input's unknown field is refused by an error that names it.
        del node["additionalProperties"]
    if side == "output" and isinstance(node.get("required"), list):
        # pydantic calls required the fields without a default, yet an answer carries every
        # field (those left out when null are the exception): the list says nothing true.
        del node["required"]
    properties = node.get("properties")
    if isinstance(properties, dict):
        for prop in properties.values():
            if isinstance(prop, dict):
                _property(prop, side)
    for value in node.values():
        _compact(value, side)
    # Last, once its branches are compacted: an `anyOf` of bare types is a list of types.
    branches = node.get("anyOf")
    if isinstance(branches, list) and all(_bare_type(b) for b in branches):
        del node["anyOf"]
        node["type"] = [b["type"] for b in branches]


def _property(prop: dict[str, Any], side: Side) -> None:
    branches = prop.get("anyOf")
    nullable = isinstance(branches, list) and len(branches) == 2 and _NULL in branches
    if side == "input":
        # Leaving an optional input out and sending null mean the same, so it says only what to
        # send. (One whose default is not null keeps its null, which may mean something else.)
        if "default" not in prop or prop["default"] is not None:
            return
        del prop["default"]
        if nullable:
            _merge(prop, _inner(prop))
        return
    # An answer carries every field it has: its defaults say nothing.
    prop.pop("default", None)
    if nullable:
        inner = _inner(prop)
        if isinstance(inner.get("type"), str) and not _EXCLUDES_NULL & inner.keys():
            _merge(prop, {**inner, "type": [inner["type"], "null"]})


def _bare_type(branch: Any) -> bool:
    return isinstance(branch, dict) and set(branch) == {"type"} and isinstance(branch["type"], str)


def _inner(prop: dict[str, Any]) -> dict[str, Any]:
    (inner,) = [b for b in prop["anyOf"] if b != _NULL]
    return dict(inner)


def _merge(prop: dict[str, Any], inner: dict[str, Any]) -> None:
    del prop["anyOf"]
    for key, value in inner.items():
        prop.setdefault(key, value)


def _undescribe(node: Any) -> None:
    if isinstance(node, list):
        for item in node:
            _undescribe(item)
    elif isinstance(node, dict):
        # A `description` keyword is a string; a property named "description" is a schema.
        if isinstance(node.get("description"), str):
            del node["description"]
        for value in node.values():
            _undescribe(value)


def _drop_unreferenced(schema: dict[str, Any]) -> None:
    """Definitions that only a model referred to (and not given here), gone with it."""
    definitions = schema.get("$defs")
    while definitions:
        text = json.dumps(schema)
        unused = [name for name in definitions if f'"#/$defs/{name}"' not in text]
        if not unused:
            break
        for name in unused:
            del definitions[name]
    if definitions == {}:
        del schema["$defs"]
