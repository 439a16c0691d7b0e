"""Deployed Modal Functions through the operations: the real `modal` SDK against the test control
plane, whose fake deployed functions do what each test says. Off by default; a name off the
allowlist is refused before any Modal call; arguments and results are JSON (CBOR on the wire,
never pickles) and results are bounded per surface."""

from __future__ import annotations

import asyncio
import pickle
from typing import Any

import cbor2
import httpx2
import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_control_plane.functions import RawOutput
from modal_proto import api_pb2
from modal_workspace_core.config import ConfigError, load_settings
from modal_workspace_core.errors import WorkspaceError
from modal_workspace_core.operations import call, new_service, operation, parse_input
from modal_workspace_core.operations.machinery.limits import Surface
from modal_workspace_core.runtime.service import Service
from modal_workspace_core.surfaces.rest.app import create_app
from service_support import TOKEN, RecordingDriver

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

ALLOWED = "ml/predict,ml/slow,ml/big,ml/raw"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


def service(allowed: str = ALLOWED, **env: str) -> Service:
    return new_service(
        RecordingDriver(), load_settings({"MODAL_WORKSPACE_ALLOWED_FUNCTIONS": allowed, **env})
    )


async def run(svc: Service, name: str, surface: Surface = "python", **args: Any) -> Any:
    op = operation(name)
    return await call(svc, op, parse_input(op, args, surface))


def modal_calls(plane: ControlPlane) -> int:
    return sum(plane.calls().values())


@pytest.fixture
def plane(modal_control_plane: ControlPlane) -> ControlPlane:
    """The control plane with the functions the tests call deployed."""
    gate = asyncio.Event()

    async def slow(x: int) -> int:
        await gate.wait()
        return x

    modal_control_plane.deploy_function("ml", "predict", lambda x, scale=1: {"y": x * scale})
    modal_control_plane.deploy_function("ml", "slow", slow)
    modal_control_plane.deploy_function("ml", "big", lambda n: "x" * n)
    modal_control_plane.deploy_function("ml", "other", lambda: "never allowlisted")
    return modal_control_plane


async def test_an_allowlisted_function_is_called_with_json_and_answers_json(
    plane: ControlPlane,
) -> None:
    result = await run(
        service(),
        "function_call",
        app_name="ml",
        function_name="predict",
        args=[21],
        kwargs={"scale": 2},
    )
    assert result.state == "succeeded"
    assert result.result == {"y": 42}
    assert result.function == "ml/predict"
    assert result.function_call_id.startswith("fc-")
    [record] = plane.function_calls()
    assert (record.args, record.kwargs) == ([21], {"scale": 2})
    # The arguments went as CBOR, never pickled (the control plane refuses anything else).
    assert plane.calls()["FunctionMap"] == 1
    assert plane.unimplemented == []


async def test_spawn_then_get_then_cancel(plane: ControlPlane) -> None:
    svc = service()
    spawned = await run(svc, "function_spawn", app_name="ml", function_name="slow", args=[7])
    call_id = spawned.function_call_id
    pending = await run(svc, "function_call_get", function_call_id=call_id, wait_seconds=0.2)
    assert pending.state == "running" and pending.result is None
    cancelled = await run(svc, "function_call_cancel", function_call_id=call_id)
    assert cancelled.cancelled and cancelled.function == "ml/slow"
    [record] = plane.function_calls()
    assert record.cancelled and record.task is not None and record.task.cancelled()
    after = await run(svc, "function_call_get", function_call_id=call_id, wait_seconds=1)
    assert after.state == "failed"
    assert plane.unimplemented == []


async def test_a_spawned_call_is_read_when_it_is_done(plane: ControlPlane) -> None:
    svc = service()
    spawned = await run(svc, "function_spawn", app_name="ml", function_name="predict", args=[1])
    got = await run(
        svc, "function_call_get", function_call_id=spawned.function_call_id, wait_seconds=5
    )
    assert (got.state, got.result, got.function) == ("succeeded", {"y": 1}, "ml/predict")


async def test_a_failing_function_reports_its_error_not_a_pickle(plane: ControlPlane) -> None:
    def boom() -> None:
        raise ValueError("bad input 123")

    plane.deploy_function("ml", "raw", boom)
    result = await run(service(), "function_call", app_name="ml", function_name="raw")
    assert result.state == "failed"
    assert "bad input 123" in (result.error or "")


@pytest.mark.parametrize(
    ("name", "args", "field"),
    [
        ("function_call", {"app_name": "ml", "function_name": "other"}, "function_name"),
        ("function_spawn", {"app_name": "evil", "function_name": "predict"}, "function_name"),
        ("function_call", {"app_name": "ml", "function_name": "Cls.method"}, "function_name"),
        ("function_call", {"app_name": "ml/x", "function_name": "predict"}, "app_name"),
        ("app_get", {"app_name": "billing"}, "app_name"),
        (
            "function_call_get",
            {"function_call_id": "fc-../../etc/passwd0000000"},
            "function_call_id",
        ),
        ("function_call_cancel", {"function_call_id": "sb-" + "a" * 26}, "function_call_id"),
    ],
)
async def test_refused_names_and_ids_make_no_modal_call(
    plane: ControlPlane, name: str, args: dict[str, Any], field: str
) -> None:
    before = modal_calls(plane)
    with pytest.raises(WorkspaceError) as caught:
        await run(service(), name, **args)
    assert caught.value.field == field, caught.value
    assert caught.value.status in (400, 403)
    assert modal_calls(plane) == before == 0
    assert plane.function_calls() == []


async def test_a_denial_names_the_setting_and_not_the_allowed_functions(
    plane: ControlPlane,
) -> None:
    with pytest.raises(WorkspaceError) as caught:
        await run(service(), "function_call", app_name="ml", function_name="other")
    assert caught.value.status == 403
    assert "MODAL_WORKSPACE_ALLOWED_FUNCTIONS" in caught.value.message
    assert "predict" not in caught.value.message


async def test_everything_is_off_by_default_and_refused_before_any_call(
    plane: ControlPlane,
) -> None:
    svc = new_service(RecordingDriver(), load_settings({}))
    calls = [
        ("function_call", {"app_name": "ml", "function_name": "predict"}),
        ("function_spawn", {"app_name": "ml", "function_name": "predict"}),
        ("function_call_get", {"function_call_id": "fc-" + "A" * 26}),
        ("function_call_cancel", {"function_call_id": "fc-" + "A" * 26}),
        ("app_get", {"app_name": "ml"}),
        ("app_list", {}),
    ]
    for name, args in calls:
        with pytest.raises(WorkspaceError) as caught:
            await run(svc, name, **args)
        assert caught.value.status == 403, name
        assert (
            "is off" in caught.value.message
            and "MODAL_WORKSPACE_ALLOWED_FUNCTIONS" in caught.value.message
        )
    assert modal_calls(plane) == 0


async def test_a_call_of_a_function_off_the_allowlist_cannot_be_read_or_cancelled(
    plane: ControlPlane,
) -> None:
    # Someone spawned `ml/other` (allowlisted on another gateway); this one does not list it.
    wide = service("ml/predict,ml/other")
    spawned = await run(wide, "function_spawn", app_name="ml", function_name="other")
    narrow = service("ml/predict")
    for name in ("function_call_get", "function_call_cancel"):
        with pytest.raises(WorkspaceError) as caught:
            await run(narrow, name, function_call_id=spawned.function_call_id)
        assert caught.value.status == 403 and caught.value.field == "function_call_id"
    [record] = plane.function_calls()
    assert not record.cancelled


@pytest.mark.parametrize(
    ("surface", "asked", "most"),
    [("actions", None, 80_000), ("mcp", 50_000, 1_000_000), ("python", 50_000, 8_000_000)],
)
async def test_a_result_too_big_for_the_surface_is_refused_with_what_to_do(
    plane: ControlPlane, surface: Surface, asked: int | None, most: int
) -> None:
    bound = {} if asked is None else {"max_result_chars": asked}
    with pytest.raises(WorkspaceError) as caught:
        await run(
            service(),
            "function_call",
            surface,
            app_name="ml",
            function_name="big",
            args=[100_000],
            **bound,
        )
    assert caught.value.status == 413 and caught.value.field == "max_result_chars"
    assert f"over max_result_chars ({asked or most})" in caught.value.message
    assert "function_call_get" in caught.value.message
    # The surface's bound is its most: a larger one is refused before any call.
    too_many = {"function_call_id": "fc-" + "A" * 26, "max_result_chars": most + 1}
    with pytest.raises(WorkspaceError) as caught:
        parse_input(operation("function_call_get"), too_many, surface)
    assert caught.value.field == "max_result_chars"


async def test_the_actions_surface_bounds_the_wait_and_the_result_by_default(
    plane: ControlPlane,
) -> None:
    inp: Any = parse_input(
        operation("function_call"), {"app_name": "ml", "function_name": "predict"}, "actions"
    )
    assert (inp.wait_seconds, inp.max_result_chars) == (25, 80_000)
    for surface, most in (("actions", 30), ("mcp", 45)):
        with pytest.raises(WorkspaceError):
            parse_input(
                operation("function_call_get"),
                {"function_call_id": "fc-" + "A" * 26, "wait_seconds": most + 1},
                surface,
            )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "output",
    [
        RawOutput(pickle.dumps({"y": 1}), api_pb2.DATA_FORMAT_PICKLE),
        RawOutput(cbor2.dumps(b"\x00bytes")),
        RawOutput(cbor2.dumps({1: "int key"})),
        RawOutput(cbor2.dumps(float("nan"))),
    ],
    ids=["pickle", "bytes", "int-key", "nan"],
)
async def test_results_that_are_not_json_are_refused(
    plane: ControlPlane, output: RawOutput
) -> None:
    plane.deploy_function("ml", "raw", lambda: output)
    with pytest.raises(WorkspaceError) as caught:
        await run(service(), "function_call", app_name="ml", function_name="raw")
    assert caught.value.status == 502, caught.value


async def test_a_function_that_cannot_take_cbor_is_not_called_with_pickles(
    plane: ControlPlane,
) -> None:
    plane.deploy_function(
        "ml",
        "raw",
        lambda: 1,
        input_formats=(api_pb2.DATA_FORMAT_PICKLE,),
        output_formats=(api_pb2.DATA_FORMAT_PICKLE,),
    )
    with pytest.raises(WorkspaceError) as caught:
        await run(service(), "function_call", app_name="ml", function_name="raw")
    assert caught.value.status == 502 and "CBOR" in caught.value.message
    assert plane.calls()["FunctionMap"] == 0


async def test_arguments_are_json_and_bounded(plane: ControlPlane) -> None:
    op = operation("function_call")
    with pytest.raises(WorkspaceError) as caught:
        parse_input(op, {"app_name": "ml", "function_name": "predict", "args": ["x" * 70_000]})
    assert "64000" in caught.value.message
    with pytest.raises(WorkspaceError):
        parse_input(op, {"app_name": "ml", "function_name": "predict", "args": [float("nan")]})


async def test_app_get_and_app_list_show_only_apps_with_allowlisted_functions(
    plane: ControlPlane,
) -> None:
    plane.deploy_function("billing", "charge", lambda: None)
    svc = service("ml/predict")
    app = await run(svc, "app_get", app_name="ml")
    assert app.name == "ml" and app.app_id.startswith("ap-")
    assert set(app.functions) == {"predict", "slow", "big", "other"}
    assert app.allowed_functions == ["predict"]
    listed = await run(svc, "app_list")
    assert [a.name for a in listed.apps] == ["ml"]
    assert plane.unimplemented == []


def test_the_actions_setting_needs_an_allowlist() -> None:
    with pytest.raises(ConfigError, match="MODAL_WORKSPACE_ALLOWED_FUNCTIONS"):
        load_settings({"MODAL_WORKSPACE_FUNCTIONS_IN_ACTIONS": "1"})
    with pytest.raises(ConfigError, match="entry 'ml'"):
        load_settings({"MODAL_WORKSPACE_ALLOWED_FUNCTIONS": "ml"})


async def actions_ids(svc: Service) -> set[str]:
    app = create_app(svc, [TOKEN])
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(
        transport=transport, base_url="http://127.0.0.1:8000", headers=HEADERS
    ) as c:
        schema = (await c.get("/action-openapi.json")).json()
    return {op["operationId"] for item in schema["paths"].values() for op in item.values()}


async def test_functions_are_out_of_the_actions_schema_unless_turned_on() -> None:
    default = await actions_ids(service())
    assert not {"function_call", "function_spawn", "app_list"} & default
    on = await actions_ids(service(MODAL_WORKSPACE_FUNCTIONS_IN_ACTIONS="1"))
    assert len(on) <= 30
    assert {"function_call", "function_call_get", "function_call_cancel"} <= on
    swapped_out = {"workspace_realtime_exec_input", "workspace_snapshot_delete", "file_remove"}
    assert swapped_out <= default and not swapped_out & on
    # Delivering the work stays in either way.
    assert {"repo_commit", "repo_push", "repo_pull_request"} <= default & on


async def test_a_result_too_big_for_gpt_actions_is_a_413_over_rest(plane: ControlPlane) -> None:
    svc = service()
    app = create_app(svc, [TOKEN])
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(
        transport=transport, base_url="http://127.0.0.1:8000", headers=HEADERS
    ) as c:
        response = await c.post(
            "/api/modal/function-calls",
            json={"app_name": "ml", "function_name": "big", "args": [90_000]},
        )
        ok = await c.post(
            "/api/modal/function-calls",
            json={"app_name": "ml", "function_name": "big", "args": [70_000]},
        )
    assert response.status_code == 413, response.text
    assert response.json()["error"]["field"] == "max_result_chars"
    assert ok.status_code == 200 and len(ok.json()["result"]) == 70_000


async def test_mcp_offers_the_functions_as_open_world_tools_and_calls_them(
    plane: ControlPlane,
) -> None:
    from mcp import Client
    from modal_workspace_core.surfaces.mcp import build_server

    async with Client(build_server(service()), mode="legacy") as client:  # type: ignore[arg-type]
        tools = {t.name: t for t in (await client.list_tools()).tools}
        answer = await client.call_tool(
            "function_call", {"app_name": "ml", "function_name": "predict", "args": [2]}
        )
        refused = await client.call_tool(
            "function_call", {"app_name": "ml", "function_name": "other"}
        )
    hints = tools["function_call"].annotations
    assert hints is not None and hints.open_world_hint and not hints.read_only_hint
    assert answer.structured_content is not None
    assert answer.structured_content["result"] == {"y": 2}
    assert refused.is_error
    assert len(plane.function_calls()) == 1


async def test_the_python_api_calls_an_allowlisted_function(plane: ControlPlane) -> None:
    from modal_workspace_core import Workspaces

    settings = load_settings({"MODAL_WORKSPACE_ALLOWED_FUNCTIONS": "ml/predict"})
    async with Workspaces(RecordingDriver(), settings=settings) as wss:  # type: ignore[arg-type]
        answer: Any = await wss.call(
            "function_call", app_name="ml", function_name="predict", kwargs={"x": 5}
        )
    assert answer.result == {"y": 5}
