"""How `modal-workspace serve` starts and stops, as a real process on real sockets: a port that
is taken is one error line and exit 2 (no banner, no token), and SIGINT or SIGTERM stops it
within seconds while clients hold long-polls open, each answered rather than left hanging."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from e2e_support import wait_until_healthy
from modal_workspace_core.drivers.local.driver import LocalDriver
from service_support import TOKEN, free_port

SCRIPT = Path(sys.executable).with_name("modal-workspace")
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# A generous bound for "within a couple of seconds": these machines are noisy.
STOP_BOUND = 10.0


def server_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    return env | {"MODAL_WORKSPACE_DATA_ROOT": str(tmp / "data"), **extra}


def test_a_port_in_use_is_one_error_line_and_exit_2_with_no_banner_nor_token(
    tmp_path: Path,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [str(SCRIPT), "serve", "--port", str(port)],
            env=server_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2
    assert done.stdout == "", "no banner"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"127.0.0.1:{port}" in lines[0]
    assert "already in use" in lines[0] and "--port" in lines[0]
    assert "token" not in done.stderr.lower()


@contextlib.contextmanager
def running_server(tmp: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    port = free_port()
    log = tmp / "server.log"
    env = server_env(tmp, MODAL_WORKSPACE_MCP_TOKEN=TOKEN, MODAL_WORKSPACE_ISOLATION="none")
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(SCRIPT), "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, base, log)
        yield process, base, log
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
        asyncio.run(end_workspaces(tmp / "data"))


async def end_workspaces(data_root: Path) -> None:
    """Agent daemons outlive a server by design: this test's end with it, as terminating them
    through the API would (the server is gone by then)."""
    driver = LocalDriver(data_root, isolation="none")
    for record in await driver.list():
        await driver.destroy(record.workspace_id)


def in_thread(call: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Runs `call` in a thread; its response (or the error that ended it) lands in the dict."""
    got: dict[str, Any] = {}

    def run() -> None:
        try:
            got["response"] = call()
        except httpx2.HTTPError as exc:
            got["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, got


def stop_and_time(process: subprocess.Popen[bytes], sig: signal.Signals) -> float:
    started = time.monotonic()
    process.send_signal(sig)
    process.wait(60)
    return time.monotonic() - started


def start_sleeper(api: httpx2.Client) -> tuple[str, str]:
    ws = api.post("/workspaces", json={}).raise_for_status().json()["workspace_id"]
    started = api.post(f"/workspaces/{ws}/realtime-execs", json={"command": "sleep 120"})
    return ws, started.raise_for_status().json()["exec_id"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_answers_the_open_long_polls_with_what_they_have(
    tmp_path: Path, sig: signal.Signals
) -> None:
    with (
        running_server(tmp_path) as (process, base, log),
        httpx2.Client(base_url=f"{base}/api", headers=AUTH, timeout=60) as api,
    ):
        ws, exec_id = start_sleeper(api)
        # Past the `started` event: nothing more comes until the command ends in 120 s.
        first = api.get(f"/workspaces/{ws}/realtime-execs/{exec_id}/events").json()
        cursor = first["next_cursor"]
        url = f"/workspaces/{ws}/realtime-execs/{exec_id}/events"
        poll, got = in_thread(
            lambda: api.get(url, params={"cursor": cursor, "wait_seconds": 25}, timeout=60)
        )
        time.sleep(1.0)  # the long-poll is parked in the server
        assert poll.is_alive(), "the long-poll waits for an event"
        took = stop_and_time(process, sig)
        poll.join(30)
    assert took < STOP_BOUND, f"the server took {took:.1f} s to stop: {log.read_text()}"
    # What the stream had: nothing new (the client polls again, at the next server).
    response = got["response"]
    assert response.status_code == 200, response.text
    page = response.json()
    assert page["events"] == [] and page["next_cursor"] == cursor and not page["done"]
    assert "Traceback" not in log.read_text()


def test_a_request_still_running_at_a_stop_is_told_to_try_again(tmp_path: Path) -> None:
    with (
        running_server(tmp_path) as (process, base, log),
        httpx2.Client(base_url=f"{base}/api", headers=AUTH, timeout=60) as api,
    ):
        ws = api.post("/workspaces", json={}).raise_for_status().json()["workspace_id"]
        run, got = in_thread(
            lambda: api.post(f"/workspaces/{ws}/exec", json={"command": "sleep 120"})
        )
        time.sleep(1.0)
        assert run.is_alive(), "the command runs"
        took = stop_and_time(process, signal.SIGINT)
        run.join(30)
    assert took < STOP_BOUND, f"the server took {took:.1f} s to stop: {log.read_text()}"
    response = got["response"]
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.json()["error"]["code"] == "upstream"
    assert "Traceback" not in log.read_text()
