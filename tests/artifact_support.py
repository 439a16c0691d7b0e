"""What the artifact tests share: a gateway on the local driver (real HTTP, the real agent)
with a small artifact bound, a workspace on it, and trees and tars written and hashed in
chunks (nothing of a large tree is held whole in memory)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
from e2e_support import Served, api_client, backend_for, ok, serve

# The gateway's artifact bound in these tests: above the 100 MiB tree, small enough to refuse.
MAX_BYTES = 160 * 1024 * 1024
CHUNK = 1024 * 1024


@dataclass
class Gateway:
    served: Served
    api: httpx2.Client
    workspace_id: str

    @property
    def artifacts(self) -> str:
        return f"/workspaces/{self.workspace_id}/artifacts"

    def sh(self, command: str) -> str:
        result = ok(
            self.api.post(
                f"/workspaces/{self.workspace_id}/exec",
                json={"command": command, "timeout_seconds": 120},
            )
        )
        assert result["returncode"] == 0, result
        return str(result["stdout"])

    def tree(self, path: str = ".") -> list[str]:
        listed = ok(
            self.api.get(
                f"/workspaces/{self.workspace_id}/files",
                params={"path": path, "depth": 8, "max_entries": 10_000},
            )
        )
        return sorted(e["path"] for e in listed["entries"])


@contextlib.contextmanager
def gateway(tmp: Path, driver: str = "local", **env: str) -> Iterator[Gateway]:
    """A served gateway on `driver` (`local`, or `modal`: the real SDK against the test
    control plane) with a workspace."""
    with contextlib.ExitStack() as stack:
        backend = stack.enter_context(backend_for(driver, tmp, "ghs_" + "0" * 36))
        backend = dataclasses.replace(
            backend,
            env={**backend.env, "MODAL_WORKSPACE_ARTIFACT_MAX_BYTES": str(MAX_BYTES), **env},
        )
        served = stack.enter_context(serve(tmp, "ghs_" + "0" * 36, backend))
        api = stack.enter_context(api_client(served))
        workspace = ok(api.post("/workspaces", json={}))
        yield Gateway(served, api, workspace["workspace_id"])


def write_random(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        left = size
        while left:
            n = min(left, CHUNK)
            out.write(os.urandom(n))
            left -= n


def digest_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def tree_digests(root: Path) -> dict[str, str]:
    """Every entry under `root`: a file's sha256, a symlink's target, `dir` for a directory."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[rel] = "-> " + os.readlink(path)
        elif path.is_dir():
            found[rel] = "dir"
        else:
            found[rel] = digest_file(path)
    return found


def tar_digests(stream: io.BufferedIOBase) -> dict[str, str]:
    """The same of a tar read as a stream (`r|`: one pass, nothing held whole)."""
    found: dict[str, str] = {}
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            name = member.name.removeprefix("./").rstrip("/")
            if member.issym():
                found[name] = "-> " + member.linkname
            elif member.isdir():
                found[name] = "dir"
            elif member.isfile():
                h = hashlib.sha256()
                data = tar.extractfile(member)
                assert data is not None
                while chunk := data.read(CHUNK):
                    h.update(chunk)
                found[name] = h.hexdigest()
    return found


def tar_of(root: Path, out: Path) -> None:
    """`root`'s tree as a tar file (its entries relative to `root`), written as it is walked."""
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(root.rglob("*")):
            tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False)


def file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk
