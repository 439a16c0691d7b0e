"""What the agent benchmark starts and stops: an agent daemon in a temporary directory, the
gateway (`modal-workspace serve` on the local driver), the baseline servers, and /proc readings.

Every process started here is ended by the context manager that started it.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
AGENT = [sys.executable, "-m", "modal_workspace_core.agent"]
SERVE = Path(sys.executable).with_name("modal-workspace")
TOKEN = "bench-token-0123456789abcdef"
STARTUP_SECONDS = 60.0


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def proc_memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


@contextlib.contextmanager
def temp_dir() -> Iterator[Path]:
    # Short: a unix socket path must fit in 108 bytes.
    path = Path(tempfile.mkdtemp(prefix="mwcb-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def wait_for_socket(path: Path, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited at start: {log.read_text()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{process.args!r} did not open {path}")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
            return
        except OSError:
            time.sleep(0.02)
        finally:
            probe.close()


@dataclass
class Daemon:
    socket: Path
    process: subprocess.Popen[bytes]

    def memory(self) -> tuple[int, int]:
        return proc_memory(self.process.pid)


@contextlib.contextmanager
def daemon(*extra: str) -> Iterator[Daemon]:
    """An agent daemon on a fresh workspace and state directory, with `extra` options."""
    with temp_dir() as base:
        root, state, sock, log = base / "ws", base / "state", base / "a.sock", base / "daemon.log"
        root.mkdir()
        argv = [*AGENT, "daemon", "--root", str(root), "--state-dir", str(state)]
        argv += ["--socket", str(sock), *extra]
        env = {**os.environ, "MWC_AGENT_LOG": "warn"}
        with log.open("wb") as out:
            process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=out)
        try:
            wait_for_socket(sock, process, log)
            yield Daemon(sock, process)
        finally:
            stop(process)


@contextlib.contextmanager
def baseline_unix(argv: list[str]) -> Iterator[Path]:
    """The asyncio baseline server, piping `argv`'s stdout to its first client."""
    with temp_dir() as base:
        sock, log = base / "b.sock", base / "baseline.log"
        cmd = [sys.executable, str(BENCH / "baseline_pipe.py"), "unix", str(sock), "--", *argv]
        with log.open("wb") as out:
            process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=out)
        try:
            wait_for_socket(sock, process, log)
            yield sock
        finally:
            stop(process)


class Http:
    """One keep-alive HTTP/1.1 connection with the bearer token: the long-poll client."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        self.conn.request(method, path, body=data, headers=self.headers)
        response = self.conn.getresponse()
        raw = response.read()
        if response.status != 200:
            raise RuntimeError(f"{method} {path}: {response.status} {raw[:500]!r}")
        return json.loads(raw)

    def close(self) -> None:
        self.conn.close()


def wait_for_http(port: int, process: subprocess.Popen[bytes], log: Path, path: str) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited at start: {log.read_text()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{process.args!r} did not answer on port {port}")
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            try:
                conn.request("GET", path)
                if conn.getresponse().status == 200:
                    return
            finally:
                conn.close()
        time.sleep(0.1)


@dataclass
class Server:
    """An HTTP server the benchmark started: where it listens, and its process (for /proc)."""

    port: int
    process: subprocess.Popen[bytes]

    def memory(self) -> tuple[int, int]:
        return proc_memory(self.process.pid)


@contextlib.contextmanager
def gateway() -> Iterator[int]:
    """`gateway_server()`'s port."""
    with gateway_server() as server:
        yield server.port


@contextlib.contextmanager
def gateway_server(serve: Path = SERVE) -> Iterator[Server]:
    """`modal-workspace serve` on the local driver at 127.0.0.1 (unisolated: bubblewrap wraps
    the daemon only, not the data path); ends its workspaces, then itself. `serve` may be
    another checkout's command, to compare two versions of the gateway in one run."""
    with temp_dir() as base:
        port, log = free_port(), base / "gateway.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_WORKSPACE_")}
        env |= {"MODAL_WORKSPACE_MCP_TOKEN": TOKEN, "MODAL_WORKSPACE_ISOLATION": "none"}
        argv = [str(serve), "serve", "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--driver", "local", "--data-root", str(base / "data")]
        with log.open("wb") as out:
            process = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            wait_for_http(port, process, log, "/healthz")
            yield Server(port, process)
        finally:
            # The workspaces' daemons outlive the server by design: end them first.
            with contextlib.suppress(OSError, RuntimeError, http.client.HTTPException):
                api = Http(port)
                for ws in api.call("GET", "/api/workspaces").get("workspaces", []):
                    api.call("DELETE", f"/api/workspaces/{ws['workspace_id']}")
                api.close()
            stop(process, signal.SIGINT)


@contextlib.contextmanager
def baseline_rest(argv: list[str], mode: str = "rest") -> Iterator[int]:
    """`baseline_server()`'s port."""
    with baseline_server(argv, mode) as server:
        yield server.port


@contextlib.contextmanager
def baseline_server(argv: list[str], mode: str = "rest") -> Iterator[Server]:
    """A baseline server piping `argv`'s stdout to long-polls: FastAPI/uvicorn (`rest`), or
    the standard library's `http.server` (`stdlib`)."""
    with temp_dir() as base:
        port, log = free_port(), base / f"baseline-{mode}.log"
        cmd = [sys.executable, str(BENCH / "baseline_pipe.py"), mode, str(port), "--", *argv]
        with log.open("wb") as out:
            process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_for_http(port, process, log, "/docs" if mode == "rest" else "/healthz")
            yield Server(port, process)
        finally:
            stop(process, signal.SIGINT)
