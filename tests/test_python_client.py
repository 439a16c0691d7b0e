"""The Python API as a user meets it: methods whose signatures and help show the operation's
fields, and positional arguments in the documented order (over the real local driver and agent)."""

from __future__ import annotations

import inspect
import pydoc
import typing
from collections.abc import AsyncIterator
from pathlib import Path

import modal_workspace_core as mwc
import pytest
from modal_workspace_core import models, results
from modal_workspace_core.config import Settings, load_settings
from modal_workspace_core.service import OPERATIONS

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
        "max_output_bytes",
    ]
    command, timeout = signature.parameters["command"], signature.parameters["timeout_seconds"]
    assert command.default is inspect.Parameter.empty and command.annotation is str
    assert (timeout.default, timeout.annotation) == (60, float)
    assert signature.return_annotation is results.ExecResult
    assert typing.get_type_hints(mwc.Workspace.exec)["return"] is results.ExecResult


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
    order = ("exec_id: Exec id", "data: Bytes for stdin", "encoding: Default", "eof: Close")
    where = [text.index(line) for line in order]
    assert where == sorted(where), text


def test_create_shows_the_create_fields() -> None:
    signature = inspect.signature(mwc.Workspaces.create)
    assert list(signature.parameters)[1:] == list(models.WorkspaceCreate.model_fields)
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
