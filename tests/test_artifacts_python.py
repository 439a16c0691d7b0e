"""Artifacts through the Python API, in-process over the real local driver and agent: a local
directory uploaded as a tree and a local file as a file, downloaded again to local files, and
the base64 form MCP clients use; in-process, a listing has no gateway URL but names its link."""

from __future__ import annotations

import base64
import io
import os
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import modal_workspace_core as mwc
import pytest
from modal_workspace_core.config import Settings, load_settings
from modal_workspace_core.errors import ConflictError

pytest.importorskip("modal_workspace_core.drivers.local.driver")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(
        {"MODAL_WORKSPACE_MCP_TOKEN": "python-token-0123456789"}, data_root=tmp_path / "data"
    )


@pytest.fixture
async def ws(settings: Settings) -> AsyncIterator[mwc.Workspace]:
    async with mwc.Workspaces(settings=settings) as wss, wss.create() as ws:
        yield ws


async def test_a_local_tree_and_file_go_up_and_come_back(ws: mwc.Workspace, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "a.bin").write_bytes(os.urandom(5 * 1024 * 1024))
    (src / "b.txt").write_text("bee")
    os.symlink("sub/a.bin", src / "link")
    up = await ws.upload_artifact(src, "tree")
    assert (up.kind, up.entries, up.path) == ("dir", 4, "/workspace/tree")
    with pytest.raises(ConflictError):
        await ws.upload_artifact(src, "tree")
    out = tmp_path / "tree.tar"
    listing = await ws.download_artifact("tree", out)
    assert (listing.kind, listing.entries) == ("dir", 4)
    assert listing.download_url is None and listing.download_path
    with tarfile.open(out) as tar:
        data = tar.extractfile("sub/a.bin")
        assert data is not None and data.read() == (src / "sub" / "a.bin").read_bytes()
        assert tar.getmember("link").linkname == "sub/a.bin"

    single = await ws.upload_artifact(src / "b.txt", "one/b.txt")
    assert single.kind == "file"
    await ws.download_artifact("one/b.txt", tmp_path / "b.txt")
    assert (tmp_path / "b.txt").read_text() == "bee"


async def test_the_base64_upload_and_the_listing_as_mcp_gets_them(ws: mwc.Workspace) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"hello"))
    content = base64.b64encode(buffer.getvalue()).decode()
    done = await ws.artifact_upload("greet", "tar", content=content)
    assert (done.kind, done.bytes) == ("dir", 5)
    listing = await ws.artifact_download("greet")
    assert [(e.path, e.size) for e in listing.listing] == [("hello.txt", 5)]
