"""A real `modal-workspace serve` on the local driver for the security tests, started with the
settings and the descriptor limit a test asks for, and ended with every workspace it made."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from e2e_support import SCRIPT, stop_server, terminate_every_workspace, wait_until_healthy
from service_support import TOKEN, free_port

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Gateway:
    base_url: str
    port: int
    data_root: Path
    log: Path
    pid: int  # the server's process (a test may kill it as a crash would)

    def url(self, path: str) -> str:
        return self.base_url + path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _limit_descriptors(count: int) -> None:
    # Soft and hard alike, as on hosts whose default is 1024: the server cannot raise it.
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


@contextlib.contextmanager
def gateway(
    tmp: Path, *, env: Mapping[str, str] | None = None, max_descriptors: int | None = None
) -> Iterator[Gateway]:
    tmp.mkdir(parents=True, exist_ok=True)
    data_root = tmp / "data"
    port = free_port()
    server_env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    server_env |= {"MODAL_WORKSPACE_MCP_TOKEN": TOKEN, **(env or {})}
    log = tmp / f"server-{port}.log"
    argv = [str(SCRIPT), "serve", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--driver", "local", "--data-root", str(data_root)]
    limit = max_descriptors
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv,
            env=server_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=(lambda: _limit_descriptors(limit)) if limit is not None else None,
        )
    served = Gateway(f"http://127.0.0.1:{port}", port, data_root, log, process.pid)
    try:
        wait_until_healthy(process, f"http://127.0.0.1:{port}", log)
        yield served
    finally:
        terminate_every_workspace(served.base_url)
        stop_server(process)
