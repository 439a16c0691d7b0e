"""The end-to-end tests' server: `modal-workspace serve` (what `make serve` runs) as a real
process on 127.0.0.1, on the local driver with a temporary data root, and a token, an allowlisted
`github` secret and its value configured the way an operator would."""

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

import httpx2
from service_support import TOKEN, free_port

SCRIPT = Path(sys.executable).with_name("modal-workspace")


@dataclass
class Served:
    base_url: str
    data_root: Path
    log: Path
    github_token: str

    @property
    def api(self) -> str:
        return f"{self.base_url}/api"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def workspace_files_containing(data_root: Path, secret: str) -> list[Path]:
    """Every file under the data root (workspaces, homes, exec logs) that holds `secret`."""
    needle = secret.encode()
    found = []
    for path in data_root.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                found.append(path)
    return found


@contextlib.contextmanager
def serve(
    tmp: Path, github_token: str, isolation: str = "auto", *, terminate_all: bool = True
) -> Iterator[Served]:
    """Runs the server until the block ends; then ends its workspaces (unless told not to,
    for a restart) and the server."""
    data_root = tmp / "data"
    secrets = tmp / "secrets.json"
    secrets.write_text(json.dumps({"github": {"GH_TOKEN": github_token}}))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_WORKSPACE_")}
    env |= {
        "MODAL_WORKSPACE_MCP_TOKEN": TOKEN,
        "MODAL_WORKSPACE_ALLOWED_SECRETS": "github",
        "MODAL_WORKSPACE_LOCAL_SECRETS_FILE": str(secrets),
        # auto: bubblewrap where it works here; none: the unisolated fallback, paths and all.
        "MODAL_WORKSPACE_ISOLATION": isolation,
    }
    log = tmp / f"server-{port}.log"
    argv = [str(SCRIPT), "serve", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--driver", "local", "--data-root", str(data_root)]
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited: {log.read_text()}")
            with contextlib.suppress(httpx2.TransportError):
                if httpx2.get(f"{base_url}/healthz", timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer: {log.read_text()}")
            time.sleep(0.1)
        yield Served(base_url, data_root, log, github_token)
    finally:
        # Agent daemons outlive the server by design: end every workspace this test made.
        with contextlib.suppress(httpx2.HTTPError):
            if not terminate_all:
                raise httpx2.HTTPError("kept for the next server")
            auth = {"Authorization": f"Bearer {TOKEN}"}
            listed = httpx2.get(f"{base_url}/api/workspaces", headers=auth, timeout=60).json()
            for ws in listed.get("workspaces", []):
                url = f"{base_url}/api/workspaces/{ws['workspace_id']}"
                httpx2.delete(url, headers=auth, timeout=60)
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
