"""An unisolated workspace does not lie about its paths: its commands run in a host directory,
it reports that directory as its root, and every path a result names (files, listings, searches,
watches, repositories, tags) is under it, taken back by every operation as the same file and
opened by its commands; `..` climbs out of neither form. Over the real local driver and agent,
with `MODAL_WORKSPACE_ISOLATION=none`; an isolated workspace keeps `/workspace` throughout."""

from __future__ import annotations

from pathlib import Path

import modal_workspace_core as mwc
import pytest
from modal_workspace_core import errors
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.local.driver import LocalDriver
from modal_workspace_core.operations import operation, parse_input
from modal_workspace_core.operations.files import FileRead
from modal_workspace_core.operations.repo.status import RepoStatus
from modal_workspace_core.operations.workspaces import WorkspaceListResult
from modal_workspace_core.path_view import shown


async def test_every_reported_path_is_one_commands_open_and_the_api_takes_back(
    tmp_path: Path,
) -> None:
    driver = LocalDriver(tmp_path / "data", isolation="none")
    settings = load_settings({}, data_root=tmp_path / "data")
    async with mwc.Workspaces(driver, settings=settings) as wss, wss.create() as ws:
        root = ws.info.root
        assert root != "/workspace" and Path(root).is_dir()
        written = await ws.file_write("src/a.txt", "alpha\n", create_parents=True)
        assert written.path == f"{root}/src/a.txt"
        # The command's working directory is the root it reports.
        pwd = await ws.exec("pwd")
        assert pwd.stdout == f"{root}\n"
        cat = await ws.exec(f"cat {written.path}")
        assert cat.stdout == "alpha\n", cat
        # Taken back, in both spellings, by every kind of operation.
        assert (await ws.file_read(written.path)).content == "alpha\n"
        assert (await ws.file_read("/workspace/src/a.txt")).path == written.path
        edited = await ws.file_edit(written.path, "alpha", "beta")
        assert (edited.path, edited.replacements) == (written.path, 1)
        listing = await ws.file_list(root)
        assert listing.path == root
        assert [e.path for e in listing.entries] == [f"{root}/src"]
        deep = await ws.file_list(f"{root}/src")
        assert [e.path for e in deep.entries] == [written.path]
        hits = await ws.file_search("beta", path=root)
        assert [h.path for h in hits.hits] == [written.path]
        ran = await ws.exec("pwd", workdir=f"{root}/src")
        assert ran.stdout == f"{root}/src\n"
        watch = await ws.file_watch_start(f"{root}/src")
        assert watch.path == f"{root}/src"
        assert [w.path for w in (await ws.file_watch_list()).watches] == [f"{root}/src"]
        await ws.file_watch_cancel(watch.watch_id)
        removed = await ws.file_remove(written.path)
        assert removed.path == written.path
        assert not (Path(root) / "src" / "a.txt").exists()
        # `..` out of the reported root is refused before anything reaches the agent.
        for escape in (f"{root}/../x", f"{root}/src/../../x", "/workspace/../x"):
            with pytest.raises(errors.InvalidArgumentError):
                await ws.file_read(escape)


async def test_an_isolated_workspace_never_takes_a_host_path(tmp_path: Path) -> None:
    """The host form is the unisolated workspace's own root, nothing more: elsewhere an
    absolute path outside /workspace stays refused."""
    op = operation("file_read")
    wid = "ws-" + "0" * 32
    taken = parse_input(op, {"workspace_id": wid, "path": "/srv/ws/a"}, root="/srv/ws")
    assert isinstance(taken, FileRead) and taken.path == "/workspace/a"
    with pytest.raises(errors.InvalidArgumentError):
        parse_input(op, {"workspace_id": wid, "path": "/srv/ws/a"})
    with pytest.raises(errors.InvalidArgumentError):
        parse_input(op, {"workspace_id": wid, "path": "/srv/wsx/a"}, root="/srv/ws")


def test_results_show_workspace_paths_under_the_root_and_leave_relative_ones() -> None:
    status = RepoStatus.model_validate(
        {
            "destination": "/workspace/repo",
            "branch": "main",
            "head": None,
            "clean": False,
            "entries": [{"path": "src/a.py", "index": "M", "worktree": " "}],
        }
    )
    seen = shown(status, "/srv/ws")
    assert isinstance(seen, RepoStatus)
    assert seen.destination == "/srv/ws/repo" and seen.entries[0].path == "src/a.py"
    listed = WorkspaceListResult.model_validate(
        {
            "workspaces": [
                _workspace("/srv/one", {"repo-path": "/workspace/r", "team": "/workspace/t"}),
                _workspace("/workspace", {"repo-path": "/workspace/r"}),
            ]
        }
    )
    seen_list = shown(listed, "/workspace")
    assert isinstance(seen_list, WorkspaceListResult)
    assert [w.tags for w in seen_list.workspaces] == [
        {"repo-path": "/srv/one/r", "team": "/workspace/t"},  # a user's tag is theirs
        {"repo-path": "/workspace/r"},
    ]
    assert shown(status, "/workspace") is status


def _workspace(root: str, tags: dict[str, str]) -> dict[str, object]:
    return {
        "workspace_id": "ws-" + "1" * 32,
        "driver": "local",
        "root": root,
        "created_at": "2026-12-01T00:00:00.000Z",
        "tags": tags,
        "state": "running",
    }
