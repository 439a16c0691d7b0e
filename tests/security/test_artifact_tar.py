"""Hostile uploads and downloads through the REST API, against the real agent: a tar with `..`
entries, absolute names, a symlink out followed by a file through it, a hardlink out, a device
node, or a member over the bound is refused whole (nothing lands in the workspace, nothing
outside it changes); a download of a symlink that points out of the workspace is refused."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from artifact_support import MAX_BYTES, Gateway, gateway
from e2e_support import ok

pytest.importorskip("modal_workspace_core.drivers.local.driver")


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with gateway(tmp_path_factory.mktemp("hostile")) as g:
        g.sh("mkdir -p keep && printf kept > keep/k.txt")
        yield g


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"x", link: str = "") -> tuple:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def tar_bytes(*members: tuple) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return out.getvalue()


def oversized_member() -> bytes:
    """A header that declares a member over the gateway's bound (its data never follows: the
    header alone must be refused)."""
    info = tarfile.TarInfo("big.bin")
    info.size = MAX_BYTES + 1
    return info.tobuf(format=tarfile.GNU_FORMAT) + b"\0" * 1024


HOSTILE = {
    "a parent entry": tar_bytes(member("ok.txt"), member("../x")),
    "an absolute name": tar_bytes(member("/etc/x")),
    "a climbing name": tar_bytes(member("a/../../x")),
    "a file through a symlink out": tar_bytes(
        member("link", tarfile.SYMTYPE, link="../../outside"), member("link/file")
    ),
    "a file through an inner symlink": tar_bytes(
        member("sub", tarfile.DIRTYPE),
        member("link", tarfile.SYMTYPE, link="sub"),
        member("link/file"),
    ),
    "a symlink out": tar_bytes(member("up", tarfile.SYMTYPE, link="../../../etc")),
    "a hardlink out": tar_bytes(member("hard", tarfile.LNKTYPE, link="../../etc/passwd")),
    "an absolute hardlink": tar_bytes(member("hard", tarfile.LNKTYPE, link="/etc/passwd")),
    "a device node": tar_bytes(member("null", tarfile.CHRTYPE)),
    "a fifo": tar_bytes(member("pipe", tarfile.FIFOTYPE)),
    "a member over the bound": oversized_member(),
}


@pytest.mark.parametrize("what", sorted(HOSTILE))
def test_a_hostile_tar_is_refused_and_nothing_is_written(gw: Gateway, what: str) -> None:
    before = gw.tree()
    response = gw.api.put(
        gw.artifacts,
        params={"path": "landing", "overwrite": "true"},
        content=HOSTILE[what],
        headers={"Content-Type": "application/x-tar"},
    )
    assert response.status_code in (400, 413), (what, response.text)
    assert "nothing was written" in response.json()["error"]["message"]
    assert gw.tree() == before, what
    # Outside the workspace root nothing was made either (the commands' view of the system).
    gw.sh("test ! -e /etc/x && test ! -e ../x && test ! -e ../outside")


def test_a_download_of_a_symlink_out_of_the_workspace_is_refused(gw: Gateway) -> None:
    gw.sh("ln -sfn /etc out-link && ln -sfn ../../.. up-link")
    for path in ("out-link", "up-link"):
        response = gw.api.get(gw.artifacts, params={"path": path})
        assert response.status_code == 403, (path, response.text)
        listed = gw.api.get(gw.artifacts, params={"path": path, "listing": "true"})
        assert listed.status_code == 403, (path, listed.text)


def test_a_symlink_out_inside_a_downloaded_tree_stays_a_symlink(
    gw: Gateway, tmp_path: Path
) -> None:
    gw.sh("mkdir -p tree && printf in > tree/in.txt && ln -sfn /etc/passwd tree/passwd")
    response = gw.api.get(gw.artifacts, params={"path": "tree"})
    assert response.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(response.content), mode="r:") as tar:
        link = tar.getmember("passwd")
        assert link.issym() and link.linkname == "/etc/passwd"
        assert sorted(tar.getnames()) == ["in.txt", "passwd"]
    assert b"root:" not in response.content


def test_an_upload_of_the_root_itself_is_refused(gw: Gateway) -> None:
    response = gw.api.put(gw.artifacts, params={"path": "/workspace"}, content=b"x")
    assert response.status_code == 400, response.text
    assert ok(gw.api.get(gw.artifacts, params={"path": "keep/k.txt", "listing": "true"}))
