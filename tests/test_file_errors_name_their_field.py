"""A file operation's refusal names the input at fault, as every other refusal does: the agent
says which path it met, the operation says which field gave it (over the real local driver and
agent, through the Python API; REST renders the same `field`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import modal_workspace_core as mwc
import pytest
from modal_workspace_core.config import load_settings
from modal_workspace_core.errors import ConflictError, NotFoundError

pytest.importorskip("modal_workspace_core.drivers.local.driver")


@pytest.fixture
async def ws(tmp_path: Path) -> AsyncIterator[mwc.Workspace]:
    settings = load_settings({}, data_root=tmp_path / "data")
    async with mwc.Workspaces(settings=settings) as wss, wss.create() as ws:
        yield ws


async def test_reading_a_missing_file_is_404_naming_path(ws: mwc.Workspace) -> None:
    with pytest.raises(NotFoundError) as caught:
        await ws.file_read("no/such.txt")
    err = caught.value
    assert (err.status, err.field) == (404, "path")
    assert err.to_dict()["error"]["field"] == "path"
    assert "no/such.txt" in err.message


async def test_an_upload_onto_an_existing_path_is_409_naming_path(
    ws: mwc.Workspace, tmp_path: Path
) -> None:
    src = tmp_path / "a.txt"
    src.write_text("a")
    await ws.upload_artifact(src, "a.txt")
    with pytest.raises(ConflictError) as caught:
        await ws.upload_artifact(src, "a.txt")
    err = caught.value
    assert (err.status, err.field) == (409, "path")
    assert "overwrite" in err.message


async def test_other_file_refusals_name_path_too(ws: mwc.Workspace) -> None:
    await ws.file_write("dir/f.txt", "x")
    refusals: list[tuple[str, Callable[[], Awaitable[object]], int]] = [
        ("write over a directory", lambda: ws.file_write("dir", "x"), 409),
        ("remove a directory", lambda: ws.file_remove("dir"), 409),
        ("list a missing directory", lambda: ws.file_list("gone"), 404),
        ("download a missing path", lambda: ws.artifact_download("gone"), 404),
    ]
    for what, refused, status in refusals:
        with pytest.raises(mwc.WorkspaceError) as caught:
            await refused()
        assert (caught.value.status, caught.value.field) == (status, "path"), what
    # A wrong match count is about `old`, not the path: it names no path.
    with pytest.raises(ConflictError) as caught:
        await ws.file_edit("dir/f.txt", "absent", "y")
    assert caught.value.field != "path"
