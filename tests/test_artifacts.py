"""Artifacts over the real REST gateway (local driver, the real agent): a 100 MiB tree uploaded
as a tar and downloaded again byte for byte, single files both ways, the listing with its signed
link as GPT Actions and MCP get it, and the link refused for another workspace, another path, a
tampered signature or after its expiry."""

from __future__ import annotations

import base64
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from artifact_support import (
    Gateway,
    file_chunks,
    gateway,
    tar_digests,
    tar_of,
    tree_digests,
    write_random,
)
from e2e_support import ok
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from modal_workspace_core import _core
from modal_workspace_core.config import Settings
from service_support import TOKEN

pytest.importorskip("modal_workspace_core.drivers.local.driver")

ACTIONS_CHARS = 100_000


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with gateway(tmp_path_factory.mktemp("artifacts")) as g:
        yield g


def download_to(gw: Gateway, path: str, out: Path, **params: object) -> httpx2.Response:
    with gw.api.stream("GET", gw.artifacts, params={"path": path, **params}) as response:
        if response.status_code == 200:
            with out.open("wb") as f:
                for chunk in response.iter_bytes():
                    f.write(chunk)
        else:
            response.read()
        return response


def test_a_100_mib_tree_round_trips_byte_exact(gw: Gateway, tmp_path: Path) -> None:
    src = tmp_path / "src"
    for i in range(300):  # many small files in nested directories
        write_random(src / f"d{i % 7}" / f"sub{i % 3}" / f"f{i:03d}.bin", (i * 7919) % 65_536)
    for i in range(3):  # and a few large ones: 100 MiB in all
        write_random(src / f"big{i}.bin", 30 * 1024 * 1024)
    (src / "empty").mkdir()
    os.symlink("d0/sub0/f000.bin", src / "link")
    expected = tree_digests(src)
    total = sum(p.stat().st_size for p in src.rglob("*") if p.is_file() and not p.is_symlink())
    assert total >= 100 * 1024 * 1024 - 10 * 1024 * 1024
    archive = tmp_path / "up.tar"
    tar_of(src, archive)

    uploaded = ok(
        gw.api.put(
            gw.artifacts,
            params={"path": "tree"},
            content=file_chunks(archive),
            headers={"Content-Type": "application/x-tar"},
        )
    )
    assert (uploaded["kind"], uploaded["bytes"]) == ("dir", total)
    assert uploaded["path"].endswith("/tree")

    out = tmp_path / "down.tar"
    response = download_to(gw, "tree", out)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-tar"
    assert int(response.headers["content-length"]) == out.stat().st_size
    with out.open("rb") as f:
        assert tar_digests(f) == expected


def test_a_single_file_uploads_and_downloads_and_overwrite_is_explicit(
    gw: Gateway, tmp_path: Path
) -> None:
    blob = tmp_path / "blob.bin"
    write_random(blob, 5 * 1024 * 1024 + 7)
    put = {"params": {"path": "files/blob.bin"}, "content": blob.read_bytes()}
    done = ok(gw.api.put(gw.artifacts, **put))
    assert (done["kind"], done["bytes"], done["replaced"]) == ("file", blob.stat().st_size, False)
    again = gw.api.put(gw.artifacts, **put)
    assert again.status_code == 409, again.text
    assert "overwrite" in again.json()["error"]["message"]
    replaced = ok(
        gw.api.put(
            gw.artifacts, params={"path": "files/blob.bin", "overwrite": "true"}, content=b"x"
        )
    )
    assert replaced["replaced"] is True
    ok(gw.api.put(gw.artifacts, **{**put, "params": {"path": "files/blob.bin", "overwrite": True}}))
    out = tmp_path / "down.bin"
    response = download_to(gw, "files/blob.bin", out)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/octet-stream"
    assert out.read_bytes() == blob.read_bytes()


def test_an_upload_over_the_gateway_bound_is_refused(gw: Gateway) -> None:
    def endless() -> Iterator[bytes]:
        chunk = b"\0" * (4 * 1024 * 1024)
        for _ in range(60):  # 240 MiB, over the 160 MiB bound; no Content-Length declared
            yield chunk

    response = gw.api.put(gw.artifacts, params={"path": "huge.bin"}, content=endless())
    assert response.status_code == 413, response.text[:300]
    assert "huge.bin" not in str(gw.tree())


def listing(gw: Gateway, path: str, **params: object) -> httpx2.Response:
    return gw.api.get(gw.artifacts, params={"path": path, "listing": "true", **params})


def test_a_link_downloads_without_the_bearer_token(gw: Gateway, tmp_path: Path) -> None:
    gw.sh("mkdir -p linked/sub && printf hello > linked/sub/a.txt && printf hi > linked/b.txt")
    listed = ok(listing(gw, "linked"))
    assert listed["kind"] == "dir" and listed["entries"] == 3 and listed["size"] == 7
    assert sorted(e["path"] for e in listed["listing"]) == ["b.txt", "sub", "sub/a.txt"]
    url = listed["download_url"]
    assert url.startswith(gw.served.base_url + "/artifact-links/")
    assert listed["expires_at"].endswith("Z") and listed["download_path"] in url
    response = httpx2.get(url, timeout=60)  # no Authorization header
    assert response.status_code == 200, response.text
    assert int(response.headers["content-length"]) == len(response.content)
    with tempfile.TemporaryFile() as f:
        f.write(response.content)
        f.seek(0)
        names = sorted(tar_digests(f))  # type: ignore[arg-type]
    assert names == ["b.txt", "sub", "sub/a.txt"]
    # A file's link is its bytes.
    single = ok(listing(gw, "linked/b.txt"))
    assert httpx2.get(single["download_url"], timeout=60).content == b"hi"
    # The link is a capability: the gateway's access log names its route, not its token.
    token = url.rsplit("/", 1)[1]
    deadline = time.monotonic() + 10
    log = gw.served.log.read_text()
    while "/artifact-links/<token>" not in log and time.monotonic() < deadline:
        time.sleep(0.1)  # the line is written after the response
        log = gw.served.log.read_text()
    assert "/artifact-links/<token>" in log
    assert token not in log


def test_a_link_for_another_workspace_or_path_or_tampered_or_expired_is_refused(
    gw: Gateway,
) -> None:
    gw.sh("mkdir -p pub && printf public > pub/p.txt && printf secret > private.txt")
    url = ok(listing(gw, "pub"))["download_url"]
    base, token = url.rsplit("/", 1)
    workspace_id, expires, path, signature = token.split(".")
    other = ok(gw.api.post("/workspaces", json={}))["workspace_id"]

    def b64(text: str) -> str:
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    forged = {
        "another workspace": f"{other}.{expires}.{path}.{signature}",
        "another path": f"{workspace_id}.{expires}.{b64('/workspace/private.txt')}.{signature}",
        "a later expiry": f"{workspace_id}.{int(expires) + 3600}.{path}.{signature}",
        "a tampered signature": f"{workspace_id}.{expires}.{path}.{signature[:-2]}AA",
    }
    for what, bad in forged.items():
        response = httpx2.get(f"{base}/{bad}", timeout=30)
        assert response.status_code == 403, (what, response.text)
        assert b"secret" not in response.content
    assert httpx2.get(f"{base}/not-a-token", timeout=30).status_code == 400
    # Every gateway of the deployment derives the key alike: a link minted here, with the key
    # from the same tokens, is taken; once expired, it is refused.
    key = Settings(tokens=(TOKEN,), data_root=Path("/nonexistent")).link_secret
    assert key is not None
    now = int(time.time())
    fresh = _core.mint_link(key, workspace_id, "/workspace/pub/p.txt", now + 60)
    assert httpx2.get(f"{base}/{fresh}", timeout=30).content == b"public"
    stale = _core.mint_link(key, workspace_id, "/workspace/pub/p.txt", now - 1)
    response = httpx2.get(f"{base}/{stale}", timeout=30)
    assert response.status_code == 403 and "expired" in response.text


def test_the_listing_fits_gpt_actions_with_thousands_of_files(gw: Gateway) -> None:
    gw.sh(
        "python3 -c \"import os; os.makedirs('many', exist_ok=True); "
        "[open(f'many/{i:05d}' + 'x' * 120, 'w').close() for i in range(4000)]\""
    )
    response = listing(gw, "many", max_entries=1000)
    assert response.status_code == 200, response.text[:300]
    assert len(response.text) < ACTIONS_CHARS
    listed = response.json()
    assert listed["entries"] == 4000 and listed["truncated"] is True
    assert 0 < len(listed["listing"]) < 1000
    assert listed["download_url"]


def test_an_accept_header_for_json_gets_the_listing(gw: Gateway) -> None:
    gw.sh("printf abc > accept.txt")
    response = gw.api.get(
        gw.artifacts, params={"path": "accept.txt"}, headers={"Accept": "application/json"}
    )
    assert response.status_code == 200
    assert response.json()["size"] == 3


async def test_mcp_gets_the_listing_and_a_link_that_downloads(gw: Gateway) -> None:
    gw.sh("mkdir -p mcp && printf one > mcp/1.txt")
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
    async with Client(
        streamable_http_client(f"{gw.served.base_url}/mcp/", http_client=http), mode="legacy"
    ) as client:
        result = await client.call_tool(
            "artifact_download", {"workspace_id": gw.workspace_id, "path": "mcp"}
        )
        assert not result.is_error, result.content
        listed = result.structured_content
        assert isinstance(listed, dict)
        content = base64.b64encode(b"from mcp").decode()
        uploaded = await client.call_tool(
            "artifact_upload",
            {"workspace_id": gw.workspace_id, "path": "mcp/2.txt", "content": content},
        )
        assert not uploaded.is_error, uploaded.content
        # Thousands of entries: the listing stays within the encoded bound there too.
        gw.sh(
            "python3 -c \"import os; os.makedirs('mcp-many', exist_ok=True); "
            "[open(f'mcp-many/{i:05d}' + '\\\\\\\\' * 60, 'w').close() for i in range(3000)]\""
        )
        many = await client.call_tool(
            "artifact_download",
            {"workspace_id": gw.workspace_id, "path": "mcp-many", "max_entries": 10_000},
        )
        assert not many.is_error, many.content
        text = many.content[0].text  # type: ignore[union-attr]
        assert len(text) < ACTIONS_CHARS and json.loads(text)["truncated"] is True
        assert json.loads(text)["entries"] == 3000
    assert [e["path"] for e in listed["listing"]] == ["1.txt"]
    assert listed["download_url"].startswith(gw.served.base_url + "/artifact-links/")
    async with httpx2.AsyncClient(timeout=60) as anonymous:
        tar = (await anonymous.get(listed["download_url"])).content
    assert b"one" in tar
    assert gw.sh("cat mcp/2.txt") == "from mcp"


def test_artifacts_travel_the_same_way_on_the_modal_driver(tmp_path: Path) -> None:
    """Only agent requests carry artifacts, so the Modal driver (the real SDK against the test
    control plane) moves them as the local one does: a tree up and down, and a link."""
    (tmp_path / "modal").mkdir()
    with gateway(tmp_path / "modal", driver="modal") as modal:
        src = tmp_path / "src"
        write_random(src / "a" / "big.bin", 9 * 1024 * 1024)
        (src / "b.txt").write_text("bee")
        archive = tmp_path / "up.tar"
        tar_of(src, archive)
        uploaded = ok(
            modal.api.put(
                modal.artifacts,
                params={"path": "tree", "format": "tar"},
                content=file_chunks(archive),
            )
        )
        assert uploaded["entries"] == 3
        out = tmp_path / "down.tar"
        assert download_to(modal, "tree", out).status_code == 200
        with out.open("rb") as f:
            assert tar_digests(f) == tree_digests(src)
        link = ok(listing(modal, "tree/b.txt"))["download_url"]
        assert httpx2.get(link, timeout=60).content == b"bee"


def staged(gw: Gateway) -> list[Path]:
    return list(gw.served.data_root.rglob("artifacts/*.archive"))


def wait_until_nothing_is_staged(gw: Gateway) -> None:
    deadline = time.monotonic() + 30
    while staged(gw) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert staged(gw) == []


def test_no_staged_archive_outlives_its_transfer(gw: Gateway, tmp_path: Path) -> None:
    gw.sh("mkdir -p staged && head -c 20000000 /dev/urandom > staged/blob")
    assert download_to(gw, "staged", tmp_path / "whole.tar").status_code == 200
    ok(gw.api.put(gw.artifacts, params={"path": "staged/again", "overwrite": True}, content=b"x"))
    refused = gw.api.put(
        gw.artifacts, params={"path": "staged/bad", "format": "tar"}, content=b"no"
    )
    assert refused.status_code == 400
    wait_until_nothing_is_staged(gw)
    # A client that goes away after the first bytes: its archive is removed all the same. (Far
    # more than socket buffers hold, so the gateway is still sending when the client leaves.)
    gw.sh("head -c 120000000 /dev/zero > staged/zeros")
    with gw.api.stream("GET", gw.artifacts, params={"path": "staged"}) as response:
        assert response.status_code == 200
        chunks = response.iter_raw()  # held: dropping it would close the connection already
        next(chunks)
        assert staged(gw)
    wait_until_nothing_is_staged(gw)


def test_the_actions_schema_asks_for_the_text_form_only(gw: Gateway) -> None:
    schema = httpx2.get(f"{gw.served.base_url}/action-openapi.json", timeout=30).json()
    routes = schema["paths"]["/api/workspaces/{workspace_id}/artifacts"]
    assert list(routes) == ["get"]  # the upload takes bytes: not for Actions
    download = routes["get"]
    listing_param = next(p for p in download["parameters"] if p["name"] == "listing")
    assert listing_param["required"] is True and listing_param["schema"]["enum"] == [True]
    assert list(download["responses"]["200"]["content"]) == ["application/json"]
    full = httpx2.get(f"{gw.served.base_url}/openapi.json", timeout=30).json()
    put = full["paths"]["/api/workspaces/{workspace_id}/artifacts"]["put"]
    assert "application/x-tar" in put["requestBody"]["content"]


def test_artifacts_on_an_unisolated_workspace_name_its_own_root(tmp_path: Path) -> None:
    """Without bubblewrap a workspace's root is a host directory: paths under it or under
    /workspace name the same files, and no answer or archive name leaks anything else."""
    with gateway(tmp_path, MODAL_WORKSPACE_ISOLATION="none") as plain:
        root = ok(plain.api.get(f"/workspaces/{plain.workspace_id}"))["root"]
        assert root != "/workspace"
        done = ok(plain.api.put(plain.artifacts, params={"path": f"{root}/a/b.txt"}, content=b"b"))
        assert done["path"] == f"{root}/a/b.txt"
        listed = ok(listing(plain, "/workspace/a"))
        assert [e["path"] for e in listed["listing"]] == ["b.txt"]
        assert httpx2.get(listed["download_url"], timeout=60).status_code == 200
        out = tmp_path / "a.tar"
        assert download_to(plain, f"{root}/a", out).status_code == 200
        with out.open("rb") as f:
            assert list(tar_digests(f)) == ["b.txt"]
