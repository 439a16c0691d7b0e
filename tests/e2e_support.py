"""The end-to-end tests' server: `modal-workspace serve` (what `make serve` runs) as a real
process on 127.0.0.1, with a token and an allowlisted `github` secret configured the way an
operator would, on one of two backends that the same tests run against:

- `local`: the local driver with a temporary data root; the secret's value comes from
  `MODAL_WORKSPACE_LOCAL_SECRETS_FILE`, as on a laptop.
- `modal`: `serve --driver modal` with the real `modal` SDK pointed at the test control plane
  (`tests/modal_control_plane`); the secret is a Modal Secret there, so the gateway never has
  its value, and every sandbox runs the real agent.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
from modal_control_plane import ControlPlane, short_root
from modal_control_plane.isolation import usable_bwrap
from service_support import TOKEN, free_port

SCRIPT = Path(sys.executable).with_name("modal-workspace")
BACKENDS = ("local", "modal")
_IMAGE = "e2e-workspace-image"


@dataclass
class Backend:
    """Where the server's workspaces live: the driver, what the server's environment needs for
    it, and the directory holding every workspace's files (searched for leaked secrets)."""

    driver: str
    env: dict[str, str]
    files_root: Path | None = None  # None: the server's data root
    plane: ControlPlane | None = None


def wait_until_healthy(process: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
    """Waits (60 s at most) for a started server to answer /healthz; raises with its log if it
    exits or stays silent."""
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {log.read_text()}")
        with contextlib.suppress(httpx2.TransportError):
            if httpx2.get(f"{base_url}/healthz", timeout=5).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server did not answer: {log.read_text()}")
        time.sleep(0.1)


@contextlib.contextmanager
def local_backend(tmp: Path, github_token: str, isolation: str = "auto") -> Iterator[Backend]:
    secrets = tmp / "secrets.json"
    secrets.write_text(json.dumps({"github": {"GH_TOKEN": github_token}}))
    yield Backend(
        "local",
        {
            "MODAL_WORKSPACE_LOCAL_SECRETS_FILE": str(secrets),
            # auto: bubblewrap where it works here; none: the unisolated fallback, paths and all.
            "MODAL_WORKSPACE_ISOLATION": isolation,
        },
    )


@contextlib.contextmanager
def modal_backend(github_token: str) -> Iterator[Backend]:
    """A control plane holding a published workspace image and the `github` Modal Secret."""
    if usable_bwrap() is None:
        # The agent's protocol carries container paths (`/workspace`): sandboxes need them real.
        pytest.skip("bubblewrap does not work here (.ci/run installs it)")
    with short_root() as root, ControlPlane(root) as plane:
        plane.publish_image(_IMAGE, "im-e2eworkspaceimage0000")
        plane.add_secret("github", {"GH_TOKEN": github_token})
        env = plane.sdk_env() | {
            "MODAL_WORKSPACE_DEFAULT_IMAGE_NAME": _IMAGE,
            "MODAL_WORKSPACE_SANDBOX_APP": "e2e-sandboxes",
            # The GitHub secret as modal_app.py attaches it: to the gateway, not to sandboxes.
            "GH_TOKEN": github_token,
        }
        yield Backend("modal", env, files_root=root, plane=plane)
        # Every call the product made is one the control plane implements (docs/modal.md).
        assert plane.unimplemented == []


@contextlib.contextmanager
def backend_for(name: str, tmp: Path, github_token: str) -> Iterator[Backend]:
    """`local` (isolated where bubblewrap works, like `make serve`) or `modal`."""
    if name == "local":
        with local_backend(tmp, github_token) as backend:
            yield backend
    else:
        with modal_backend(github_token) as backend:
            yield backend


@dataclass
class Served:
    base_url: str
    data_root: Path
    log: Path
    github_token: str
    backend: Backend
    pid: int = 0  # the server process (its own session: a killpg ends it and its children)

    @property
    def files_root(self) -> Path:
        """Where every file of every workspace lives (exec logs and homes included)."""
        return self.backend.files_root or self.data_root

    @property
    def api(self) -> str:
        return f"{self.base_url}/api"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def workspace_files_containing(data_root: Path, secret: str) -> list[Path]:
    """Every file under the data root (workspaces, homes, exec logs) that holds `secret`. A
    workspace's disk image is read through its mount point, file by file, like the rest."""
    needle = secret.encode()
    found = []
    for path in data_root.rglob("*"):
        if path.name == "disk.img":
            continue
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                found.append(path)
    return found


@contextlib.contextmanager
def serve(
    tmp: Path,
    github_token: str,
    backend: Backend,
    *,
    terminate_all: bool = True,
    github_env: dict[str, str] | None = None,
) -> Iterator[Served]:
    """Runs the server on `backend` until the block ends; then ends its workspaces (unless told
    not to, for a restart) and the server. `github_env`: the settings that make a test git
    server the gateway's GitHub (`GitServer.gateway_env`)."""
    data_root = tmp / "data"
    port = free_port()
    # Nothing of this process's Modal or gateway settings leaks into the server's.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    env |= {
        "MODAL_WORKSPACE_MCP_TOKEN": TOKEN,
        # As the README recommends: on Modal the secret must then hold GH_TOKEN, and its value
        # is redacted from every command's output.
        "MODAL_WORKSPACE_ALLOWED_SECRETS": "github:GH_TOKEN",
        **backend.env,
        **(github_env or {}),
    }
    log = tmp / f"server-{port}.log"
    argv = [str(SCRIPT), "serve", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--driver", backend.driver, "--data-root", str(data_root)]
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, base_url, log)
        yield Served(base_url, data_root, log, github_token, backend, process.pid)
    finally:
        if terminate_all:
            terminate_every_workspace(base_url)
        stop_server(process)


def terminate_every_workspace(base_url: str) -> None:
    """Agent daemons outlive the server by design: end every workspace the server lists, page
    after page (a list that did not fit one answer is `truncated`)."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with contextlib.suppress(httpx2.HTTPError, ValueError):
        while True:
            listed = httpx2.get(f"{base_url}/api/workspaces", headers=auth, timeout=60).json()
            for ws in listed.get("workspaces", []):
                url = f"{base_url}/api/workspaces/{ws['workspace_id']}"
                httpx2.delete(url, headers=auth, timeout=60)
            if not listed.get("truncated") or not listed.get("workspaces"):
                return


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """SIGINT, as Ctrl-C would; killed if it does not stop."""
    process.send_signal(signal.SIGINT)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)


@contextlib.contextmanager
def api_client(served: Served) -> Iterator[httpx2.Client]:
    """An HTTP client of the server's REST API, with the test token."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx2.Client(base_url=served.api, headers=headers, timeout=120) as client:
        yield client


def ok(response: httpx2.Response) -> Any:
    """The JSON of a 200 answer (any other fails the test, showing the answer)."""
    assert response.status_code == 200, response.text
    return response.json()
