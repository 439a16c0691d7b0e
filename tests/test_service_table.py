"""The operation table is the single source: REST routes, MCP tools and the Python API are
generated from it and match it exactly, name for name."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import mcp_types as types
import modal_workspace_core as mwc
import pytest
from fastapi.routing import APIRoute
from modal_workspace_core.config import load_settings
from modal_workspace_core.errors import InvalidArgumentError
from modal_workspace_core.operations import OPERATIONS, new_service, parse_input
from modal_workspace_core.runtime.service import Service
from modal_workspace_core.surfaces.mcp import build_server
from modal_workspace_core.surfaces.mcp import tools as mcp_tools
from modal_workspace_core.surfaces.rest.app import create_app
from modal_workspace_core.surfaces.tool_schema import InputSchemas, OutputSchemas
from service_support import TOKEN, RecordingDriver

# The names and routes clients already rely on (issue 4's, which the predecessor's users knew,
# and after): none of them may change or go away. A new operation needs no line here: the
# surfaces are held to the table itself, and README's table to its names.
EXPECTED = {
    "workspace_create": ("POST", "/workspaces"),
    "workspace_list": ("GET", "/workspaces"),
    "workspace_get": ("GET", "/workspaces/{workspace_id}"),
    "workspace_terminate": ("DELETE", "/workspaces/{workspace_id}"),
    "workspace_exec": ("POST", "/workspaces/{workspace_id}/exec"),
    "workspace_realtime_exec_start": ("POST", "/workspaces/{workspace_id}/realtime-execs"),
    "workspace_realtime_exec_events": (
        "GET",
        "/workspaces/{workspace_id}/realtime-execs/{exec_id}/events",
    ),
    "workspace_realtime_exec_status": (
        "GET",
        "/workspaces/{workspace_id}/realtime-execs/{exec_id}",
    ),
    "workspace_realtime_exec_input": (
        "POST",
        "/workspaces/{workspace_id}/realtime-execs/{exec_id}/input",
    ),
    "workspace_realtime_exec_cancel": (
        "POST",
        "/workspaces/{workspace_id}/realtime-execs/{exec_id}/cancel",
    ),
    "workspace_realtime_exec_list": ("GET", "/workspaces/{workspace_id}/realtime-execs"),
    "repo_clone": ("POST", "/workspaces/{workspace_id}/repo/clone"),
    "repo_fetch": ("POST", "/workspaces/{workspace_id}/repo/fetch"),
    "repo_checkout": ("POST", "/workspaces/{workspace_id}/repo/checkout"),
    "repo_status": ("GET", "/workspaces/{workspace_id}/repo/status"),
    "repo_diff": ("GET", "/workspaces/{workspace_id}/repo/diff"),
    # Issue 15: delivering the work (names and routes as the issue gives them).
    "repo_commit": ("POST", "/workspaces/{workspace_id}/repo/commit"),
    "repo_push": ("POST", "/workspaces/{workspace_id}/repo/push"),
    "repo_pull_request": ("POST", "/workspaces/{workspace_id}/repo/pull-request"),
    "file_read": ("GET", "/workspaces/{workspace_id}/files/content"),
    "file_write": ("PUT", "/workspaces/{workspace_id}/files/content"),
    "file_edit": ("POST", "/workspaces/{workspace_id}/files/edit"),
    # Issue 27: multi-file patches.
    "file_patch": ("POST", "/workspaces/{workspace_id}/files/patch"),
    "file_list": ("GET", "/workspaces/{workspace_id}/files"),
    "file_remove": ("DELETE", "/workspaces/{workspace_id}/files"),
    "file_search": ("GET", "/workspaces/{workspace_id}/files/search"),
    "artifact_download": ("GET", "/workspaces/{workspace_id}/artifacts"),
    "artifact_upload": ("PUT", "/workspaces/{workspace_id}/artifacts"),
    "workspace_file_watch_start": ("POST", "/workspaces/{workspace_id}/file-watches"),
    "workspace_file_watch_events": (
        "GET",
        "/workspaces/{workspace_id}/file-watches/{watch_id}/events",
    ),
    "workspace_file_watch_status": ("GET", "/workspaces/{workspace_id}/file-watches/{watch_id}"),
    "workspace_file_watch_list": ("GET", "/workspaces/{workspace_id}/file-watches"),
    "workspace_file_watch_cancel": ("DELETE", "/workspaces/{workspace_id}/file-watches/{watch_id}"),
    # Issue 12: one read for any stream kind.
    "stream_events": ("GET", "/workspaces/{workspace_id}/streams/{stream_id}/events"),
    # Issue 13: snapshots, resume and fork.
    "workspace_snapshot": ("POST", "/workspaces/{workspace_id}/snapshots"),
    "workspace_snapshot_list": ("GET", "/workspaces/{workspace_id}/snapshots"),
    "workspace_snapshot_delete": (
        "DELETE",
        "/workspaces/{workspace_id}/snapshots/{snapshot_id}",
    ),
    "workspace_resume": ("POST", "/workspaces/{workspace_id}/resume"),
    "workspace_fork": ("POST", "/workspaces/{workspace_id}/fork"),
    # Issue 14: deployed Modal Functions and apps, offered when functions are allowlisted.
    "function_call": ("POST", "/modal/function-calls"),
    "function_spawn": ("POST", "/modal/function-spawns"),
    "function_call_get": ("GET", "/modal/function-calls/{function_call_id}"),
    "function_call_cancel": ("DELETE", "/modal/function-calls/{function_call_id}"),
    "app_get": ("GET", "/modal/apps/{app_name}"),
    "app_list": ("GET", "/modal/apps"),
}


@pytest.fixture
def service() -> Service:
    # With a function allowlisted, so that every operation is offered (the function ones are
    # absent from MCP otherwise: tests/test_modal_functions.py).
    return new_service(
        RecordingDriver(), load_settings({"MODAL_WORKSPACE_ALLOWED_FUNCTIONS": "app/fn"})
    )


def declared() -> dict[str, tuple[str, str]]:
    return {op.name: (op.method, op.path) for op in OPERATIONS}


def test_the_operations_clients_know_keep_their_names_and_routes() -> None:
    table = declared()
    assert {name: table.get(name) for name in EXPECTED} == EXPECTED
    assert len(table) == len(OPERATIONS), "two operations share a name"


def test_every_path_parameter_is_a_field_of_the_input_model() -> None:
    for op in OPERATIONS:
        assert set(op.path_params) <= set(op.input.model_fields), op.name


def test_query_string_inputs_are_scalars() -> None:
    # A REST query is parsed one value per name (the last one wins): a GET or DELETE input that
    # took a list would need repeated names, which the route does not read.
    for op in OPERATIONS:
        if op.method not in ("GET", "DELETE"):
            continue
        for name, info in op.input.model_fields.items():
            assert "list" not in str(info.annotation), (op.name, name, info.annotation)


def test_rest_routes_are_generated_one_per_operation(service: Service) -> None:
    app = create_app(service, [TOKEN])
    routes = {
        r.operation_id: (next(iter(r.methods)), r.path)
        for r in app.routes
        if isinstance(r, APIRoute) and r.path.startswith("/api/")
    }
    assert routes == {name: (method, "/api" + path) for name, (method, path) in declared().items()}


def test_mcp_tools_are_generated_one_per_operation_with_all_four_hints(service: Service) -> None:
    server = build_server(service)

    async def listed() -> list[types.Tool]:
        async with mwc_client(server) as client:
            return (await client.list_tools()).tools

    tools = asyncio.run(listed())
    assert {t.name for t in tools} == set(declared())
    by_name = {op.name: op for op in OPERATIONS}
    for tool in tools:
        hints = tool.annotations
        assert hints is not None
        op = by_name[tool.name]
        assert hints.read_only_hint is op.hints.read_only
        assert hints.destructive_hint is op.hints.destructive
        assert hints.idempotent_hint is op.hints.idempotent
        assert hints.open_world_hint is op.hints.open_world
    # Each input's and answer's shape, a model inside several given whole by the first tool.
    inputs, outputs = InputSchemas(), OutputSchemas()
    for tool in tools:
        assert tool.input_schema == inputs(by_name[tool.name].input_for("mcp"), tool.name)
        assert tool.output_schema == outputs(by_name[tool.name].output, tool.name)


def mwc_client(server: object) -> object:
    from mcp import Client

    return Client(server, mode="legacy")  # type: ignore[arg-type]


def test_reading_operations_are_marked_read_only_and_the_rest_are_not() -> None:
    for op in OPERATIONS:
        assert op.hints.read_only is (op.method == "GET"), op.name


def test_the_python_api_has_a_method_for_every_workspace_operation() -> None:
    scoped = [op.name for op in OPERATIONS if "workspace_id" in op.input.model_fields]
    for name in scoped:
        method = {
            "workspace_get": "refresh",
            "workspace_terminate": "terminate",
            "workspace_exec": "exec",
        }.get(name, name.removeprefix("workspace_"))
        assert callable(getattr(mwc.Workspace, method)), name
    for name in ("create", "get", "list", "call"):
        assert callable(getattr(mwc.Workspaces, name))


def test_summaries_fit_the_actions_limits() -> None:
    for op in OPERATIONS:
        assert 0 < len(op.summary) <= 300, op.name
        assert len(op.description) <= 300, op.name


def test_each_surface_validates_with_its_own_bounds() -> None:
    """GPT Actions waits 30 s at most for a command, MCP 45 s, the Python API as long as asked."""
    exec_op = next(op for op in OPERATIONS if op.name == "workspace_exec")
    args = {"workspace_id": "ws-" + "0" * 32, "command": "true"}
    assert parse_input(exec_op, args, "actions").wait_seconds == 30  # type: ignore[attr-defined]
    assert parse_input(exec_op, args, "mcp").wait_seconds == 45  # type: ignore[attr-defined]
    assert parse_input(exec_op, args).wait_seconds is None  # type: ignore[attr-defined]
    for surface, most in (("actions", 30), ("mcp", 45)):
        with pytest.raises(InvalidArgumentError) as refused:
            parse_input(exec_op, {**args, "wait_seconds": most + 1}, surface)  # type: ignore[arg-type]
        assert refused.value.field == "wait_seconds"
    assert parse_input(exec_op, {**args, "wait_seconds": 600}).wait_seconds == 600  # type: ignore[attr-defined]


def test_the_readmes_table_lists_exactly_the_operations_of_the_table() -> None:
    """README's operations table (a name, then `_suffix` for its siblings) against the declared
    operations, name for name: an operation added, renamed or removed there or here fails it."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    table = readme.split("\n| operation | REST |", 1)[1].split("\n\n", 1)[0]
    listed: list[str] = []
    for line in table.splitlines():
        cells = line.split("|")
        if len(cells) < 3 or not cells[1].strip().startswith("`"):
            continue
        names = re.findall(r"`([a-z_]+)`", cells[1])
        if not names:
            continue
        first = names[0]
        for name in names:
            listed.append(first.rsplit("_", 1)[0] + name if name.startswith("_") else name)
    assert sorted(listed) == sorted(declared())


def test_the_readmes_tool_count_and_names_are_the_servers() -> None:
    """The walkthrough's MCP client prints how many tools the server lists, and the first few
    (`examples/mcp_walkthrough.py`): README shows that line as the server prints it today."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    ((count, names),) = re.findall(r"^(\d+) tools: (.+), …$", readme, flags=re.MULTILINE)
    # The walkthrough's server: the README's `make serve`, no function allowlisted.
    served = [tool.name for tool in mcp_tools(load_settings({}))]
    assert int(count) == len(served)
    first = names.split(", ")
    assert first == served[: len(first)]
