"""The MCP tools' schemas, made short (`surfaces/tool_schema.py`): an input schema still says
what to send, and every answer still validates against its tool's output schema."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from modal_workspace_core.config import load_settings
from modal_workspace_core.operations import OPERATIONS
from modal_workspace_core.surfaces.mcp import tools
from modal_workspace_core.surfaces.tool_schema import EVERY_ANSWER

WS = "ws-" + "0" * 32
EX = "ex-" + "1" * 32
SN = "sn-" + "2" * 32
BY_NAME = {tool.name: tool for tool in tools()}


def schema_of(name: str, side: str = "output") -> dict[str, Any]:
    tool = BY_NAME[name]
    schema = tool.output_schema if side == "output" else tool.input_schema
    assert schema is not None
    return schema


def keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {k for value in node.values() for k in keys(value)}
    if isinstance(node, list):
        return {k for value in node for k in keys(value)}
    return set()


def test_answers_with_nulls_nested_models_and_unions_validate() -> None:
    workspace = {
        "workspace_id": WS,
        "driver": "local",
        "root": "/workspace",
        "created_at": "2026-12-01T00:00:00Z",
        "tags": {"managed-by": "modal-workspace"},
        "state": "suspended",
        "resources": {"cpu": 1.0},
        "block_network": False,
        "lineage": {"parent_workspace_id": WS, "snapshot_id": SN, "forked_at": "x"},
        "suspension": {"reason": "idle", "at": "x", "snapshot_id": None, "detail": ""},
        "started_at": None,
        "lifecycle": [{"at": "x", "action": "suspended", "detail": "idle"}],
        EVERY_ANSWER: SN,
    }
    jsonschema.validate(workspace, schema_of("workspace_create"))
    listing = {"workspaces": [workspace], "truncated": False}
    jsonschema.validate(listing, schema_of("workspace_list"))
    for pty in (None, True, {"rows": 24, "cols": 80}):
        status = {"exec_id": EX, "state": "running", "pid": None, "signal": "SIGTERM", "pty": pty}
        jsonschema.validate(status, schema_of("workspace_realtime_exec_start"))
    page = {
        "events": [{"seq": 1, "type": "stdout", "data_b64": "/w=="}, {"seq": 2, "type": "exit"}],
        "next_cursor": 2,
        "has_more": False,
        "done": True,
        "state": None,
        "returncode": None,
    }
    jsonschema.validate(page, schema_of("workspace_realtime_exec_events"))


def test_an_answer_of_the_wrong_shape_is_still_refused() -> None:
    with pytest.raises(jsonschema.ValidationError, match="asleep"):
        jsonschema.validate({"workspace_id": WS, "state": "asleep"}, schema_of("workspace_create"))
    with pytest.raises(jsonschema.ValidationError):
        started = schema_of("workspace_realtime_exec_start")
        jsonschema.validate({"exec_id": EX, "pid": "one"}, started)


def test_a_model_several_tools_answer_is_given_whole_once() -> None:
    assert "properties" in schema_of("workspace_create")
    for name in ("workspace_get", "workspace_resume", "workspace_fork"):
        assert schema_of(name) == {"type": "object", "description": "As in workspace_create."}
    # Its inner models went with it.
    assert set(schema_of("workspace_list")["$defs"]) == {"Workspace"}


def test_no_title_null_default_or_answer_description_is_sent() -> None:
    for tool in tools():
        assert tool.output_schema is not None
        for side, schema in (("input", tool.input_schema), ("output", tool.output_schema)):
            for node in _schemas(schema):
                assert not isinstance(node.get("title"), str), (tool.name, side, node)
                assert node.get("default", 0) is not None, (tool.name, side, node)
                if side == "output" and isinstance(node.get("description"), str):
                    assert node["description"].startswith("As in "), (tool.name, node)
        assert EVERY_ANSWER not in keys(tool.output_schema), tool.name


def test_fields_named_like_keywords_are_kept() -> None:
    # A pull request's `title` and an app's `description` are fields, not keywords.
    pull = schema_of("repo_pull_request", "input")
    assert pull["properties"]["title"]["type"] == "string"
    assert "title" in pull["required"]
    app = schema_of("app_get")
    assert app["properties"]["description"] == {"type": "string"}


def test_an_optional_input_says_only_what_to_send() -> None:
    start = schema_of("workspace_realtime_exec_start", "input")["properties"]
    assert start["idempotency_key"] == {
        "description": start["idempotency_key"]["description"],
        "type": "string",
    }
    # An id the call acts on is given by its name; an optional one says what leaving it out does.
    resume = schema_of("workspace_resume", "input")["properties"]
    assert resume["workspace_id"] == {"type": "string"}
    assert "latest" in resume["snapshot_id"]["description"]
    assert resume["snapshot_id"]["pattern"].startswith("^sn-")


def test_every_declared_field_reaches_the_input_schema() -> None:
    for op in OPERATIONS:
        schema = schema_of(op.name, "input")
        assert set(schema["properties"]) == set(op.input_for("mcp").model_fields), op.name


def test_the_listed_tools_describe_each_answer_model_once() -> None:
    """With the functions off, the first tool that answers a model is still in the list."""
    listed = tools(load_settings({}))
    names = [tool.name for tool in listed]
    for tool in listed:
        for node in _schemas(tool.output_schema):
            text = node.get("description")
            if isinstance(text, str):
                first = text.removeprefix("As in ").rstrip(".")
                assert names.index(first) < names.index(tool.name), (tool.name, text)


def _schemas(node: Any) -> list[dict[str, Any]]:
    """Every schema object in `node` (not the maps of property names)."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        found.append(node)
        for key, value in node.items():
            if key in ("properties", "$defs"):
                for inner in value.values():
                    found.extend(_schemas(inner))
            elif isinstance(value, dict | list):
                found.extend(_schemas(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_schemas(value))
    return found
