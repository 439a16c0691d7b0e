"""The Python API as a user meets it: methods whose signatures and help show the operation's
fields, positional arguments in the documented order, and clients that terminate the workspaces
they created when their block ends (over the real local driver and agent)."""

from __future__ import annotations

import inspect
import pydoc
import typing
from collections.abc import AsyncIterator
from pathlib import Path

import modal_workspace_core as mwc
import pytest
from modal_workspace_core.config import Settings, load_settings
from modal_workspace_core.operations import OPERATIONS
from modal_workspace_core.operations.execs import ExecResult
from modal_workspace_core.operations.workspaces import WorkspaceCreate
from support.processes import processes_of

# --- signatures ------------------------------------------------------------------------------


def test_exec_shows_the_operations_fields_with_their_defaults_and_types() -> None:
    signature = inspect.signature(mwc.Workspace.exec)
    assert list(signature.parameters) == [
        "self",
        "command",
        "workdir",
        "env",
        "stdin",
        "timeout_seconds",
        "wait_seconds",
        "max_output_bytes",
    ]
    command, timeout = signature.parameters["command"], signature.parameters["timeout_seconds"]
    assert command.default is inspect.Parameter.empty and command.annotation is str
    assert (timeout.default, timeout.annotation) == (60, float)
    assert signature.return_annotation is ExecResult
    assert typing.get_type_hints(mwc.Workspace.exec)["return"] is ExecResult


def test_every_generated_method_takes_its_operations_fields_required_ones_first() -> None:
    for op in OPERATIONS:
        if "workspace_id" not in op.input.model_fields:
            continue
        if op.name in ("workspace_get", "workspace_terminate"):
            continue  # `refresh()` and `terminate()`: methods of their own, with no fields
        method = getattr(mwc.Workspace, op.name.removeprefix("workspace_"))
        parameters = list(inspect.signature(method).parameters.values())[1:]
        fields = {n: f for n, f in op.input.model_fields.items() if n != "workspace_id"}
        required = [n for n, f in fields.items() if f.is_required()]
        optional = [n for n, f in fields.items() if not f.is_required()]
        assert [p.name for p in parameters] == required + optional, op.name
        assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in parameters)
        assert op.description in (method.__doc__ or ""), op.name


def test_help_shows_the_signature_the_description_and_the_positional_order() -> None:
    text = pydoc.render_doc(mwc.Workspace.realtime_exec_input, renderer=pydoc.plaintext)
    assert (
        "realtime_exec_input(self, exec_id: str, data: str = '', "
        "encoding: Literal['utf-8', 'base64'] = 'utf-8', eof: bool = False)"
    ) in text
    assert "Send stdin to a realtime exec; eof closes it." in text
    order = ("exec_id: Exec id", "data: Bytes for stdin", "encoding: How data", "eof: Close")
    where = [text.index(line) for line in order]
    assert where == sorted(where), text


def test_create_shows_the_create_fields_and_a_keyword_only_keep() -> None:
    signature = inspect.signature(mwc.Workspaces.create)
    assert list(signature.parameters)[1:] == [*WorkspaceCreate.model_fields, "keep"]
    keep = signature.parameters["keep"]
    assert (keep.kind, keep.default) == (inspect.Parameter.KEYWORD_ONLY, False)
    tags = signature.parameters["tags"]
    assert (tags.annotation, tags.default) == (dict[str, str], {})
    # Pydantic's validators are not part of the type a reader sees.
    assert signature.parameters["idempotency_key"].annotation == str | None


def test_exec_stream_takes_what_a_realtime_exec_takes() -> None:
    parameters = list(inspect.signature(mwc.Workspace.exec_stream).parameters)[1:]
    assert parameters == list(inspect.signature(mwc.Workspace.realtime_exec_start).parameters)[1:]


# --- calls against a real workspace ----------------------------------------------------------


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings({}, data_root=tmp_path / "data")


@pytest.fixture
async def wss(settings: Settings) -> AsyncIterator[mwc.Workspaces]:
    async with mwc.Workspaces(settings=settings) as client:
        try:
            yield client
        finally:
            # Each has an agent daemon (and, as root, a mounted disk) that outlives the test.
            for ws in await client.list():
                await ws.terminate()


async def test_stdin_goes_to_a_realtime_exec_positionally(wss: mwc.Workspaces) -> None:
    ws = await wss.create()
    started = await ws.realtime_exec_start("cat")
    sent = await ws.realtime_exec_input(started.exec_id, "abc\n", "utf-8", True)
    assert sent.accepted == 4
    output = "".join([e.data or "" async for e in ws.follow(started.exec_id) if e.type == "stdout"])
    assert output == "abc\n"
    # Keywords work as before, after positional arguments too.
    again = await ws.realtime_exec_start(command="cat")
    await ws.realtime_exec_input(again.exec_id, data="x", eof=True)
    assert [e.data async for e in ws.follow(again.exec_id) if e.type == "stdout"] == ["x"]


async def test_a_wrong_call_is_refused_naming_the_argument(wss: mwc.Workspaces) -> None:
    ws = await wss.create()
    with pytest.raises(mwc.InvalidArgumentError, match="at most 3 positional"):
        await ws.file_read("a", 0, 10, "extra")
    with pytest.raises(mwc.InvalidArgumentError) as twice:
        await ws.file_read("a", path="b")
    assert twice.value.field == "path"
    with pytest.raises(mwc.InvalidArgumentError) as unknown:
        await ws.file_read("a", offst=1)
    assert (unknown.value.field, unknown.value.message) == ("offst", "offst: unknown field")
    with pytest.raises(mwc.InvalidArgumentError) as missing:
        await ws.file_read()
    assert missing.value.field == "path"
    with pytest.raises(mwc.InvalidArgumentError) as own:
        await ws.file_read("a", workspace_id=ws.id)
    assert own.value.field == "workspace_id"


async def test_a_workspace_gives_its_id_as_workspace_id(wss: mwc.Workspaces) -> None:
    ws = await wss.create()
    assert ws.workspace_id == ws.info.workspace_id and ws.workspace_id.startswith("ws-")
    assert ws.id == ws.workspace_id  # the older name, kept
    assert (await wss.get(ws.workspace_id)).workspace_id == ws.workspace_id


# --- clients that clean up ---------------------------------------------------------------------


async def surviving(settings: Settings) -> set[str]:
    """The workspaces still there, seen by a client of their own (which terminates none)."""
    async with mwc.Workspaces(settings=settings) as other:
        return {ws.id for ws in await other.list()}


async def test_leaving_workspaces_terminates_what_it_created_unless_kept(
    settings: Settings,
) -> None:
    async with mwc.Workspaces(settings=settings) as wss:
        made = await wss.create()
        same = await wss.create(idempotency_key="twice")
        assert (await wss.create(idempotency_key="twice")).id == same.id
        kept = await wss.create(keep=True)
        kept_later = await wss.create()
        kept_later.keep()
        ended = await wss.create()
        await ended.terminate()  # terminated already: not an error on exit
        assert (await made.exec("echo alive")).stdout == "alive\n"
        assert processes_of(made.id)
    assert await surviving(settings) == {kept.id, kept_later.id}
    assert processes_of(made.id) == [] and processes_of(same.id) == []
    # A client that only found them leaves them alone.
    async with mwc.Workspaces(settings=settings) as finder:
        found = await finder.get(kept.id)
        assert {ws.id for ws in await finder.list()} == {kept.id, kept_later.id}
    assert await surviving(settings) == {kept.id, kept_later.id}
    async with mwc.Workspaces(settings=settings) as cleanup:
        for ws_id in (found.id, kept_later.id):
            await (await cleanup.get(ws_id)).terminate()


async def test_leaving_workspaces_through_an_exception_terminates_them_too(
    settings: Settings,
) -> None:
    with pytest.raises(RuntimeError, match="the task failed"):
        async with mwc.Workspaces(settings=settings) as wss:
            ws = await wss.create()
            raise RuntimeError("the task failed")
    assert await surviving(settings) == set()
    assert processes_of(ws.id) == []


async def test_async_with_create_terminates_that_workspace_when_the_block_ends(
    wss: mwc.Workspaces,
) -> None:
    other = await wss.create()
    async with wss.create(tags={"task": "one"}) as ws:
        assert ws.info.tags["task"] == "one"
        assert (await ws.exec("echo inside")).stdout == "inside\n"
    with pytest.raises(mwc.NotFoundError):
        await wss.get(ws.id)
    with pytest.raises(ValueError, match="boom"):
        async with wss.create() as failing:
            raise ValueError("boom")
    with pytest.raises(mwc.NotFoundError):
        await wss.get(failing.id)
    async with wss.create(keep=True) as kept:
        pass
    # Only the blocks' own workspaces ended; the client's exit ends the rest but the kept one.
    assert {w.id for w in await wss.list()} == {other.id, kept.id}
    await kept.terminate()


async def test_a_creation_runs_once(wss: mwc.Workspaces) -> None:
    creation = wss.create()
    ws = await creation
    with pytest.raises(RuntimeError, match="already awaited"):
        await creation
    assert [w.id for w in await wss.list()] == [ws.id]
