"""Keystroke latency through the terminal page's relay: a key sent on the page's WebSocket to
its echo coming back on it, on the local driver and on the Modal driver against the test
control plane, with baselines measured in the same run on the same workspace.

    python bench/terminal_latency_bench.py [--keys 200] [--execs 40] [--drivers local modal]

Each driver gets a gateway (the REST app under uvicorn on 127.0.0.1) and a workspace with a
shell opened by `workspace_terminal_url`, as a person's page has it. Rows:
- keystroke over the terminal socket: one character sent as the page sends it, timed until the
  shell's echo of it arrives on the socket (the relay: the input operation over the agent
  channel, then the woken long-poll of the exec's stream, then the socket);
- keystroke over REST: the same through `workspace_realtime_exec_input` and a long-poll of
  `workspace_realtime_exec_events`, as an API client would type (the relay without the socket);
- plain exec round trip: `workspace_exec` of `true`, the baseline (a request that starts a
  process in the workspace and waits for its end).
The control plane runs on this machine: its rows say what the relay's software costs on the
Modal driver's path (the SDK's command router calls that carry the channel), not Modal's
network, which adds the same round trip between gateway and sandbox to every row.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import string
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import websocket
from agent_stack import cpu_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from modal_control_plane import ControlPlane
from modal_control_plane.fixtures import reset_modal_client
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings
from modal_workspace_core.operations import new_service, open_service
from modal_workspace_core.surfaces.rest.app import create_app
from modal_workspace_core.surfaces.rest.terminal_page import SOCKET_PROTOCOL, SOCKET_ROUTE
from service_support import TOKEN, serving

IMAGE = "bench-image"
# Sent after every so many keys: Ctrl-U, which empties the shell's line again.
_CLEAR_EVERY = 40


@contextlib.asynccontextmanager
async def gateway(kind: str, root: Path) -> AsyncIterator[str]:
    env = {
        "MODAL_WORKSPACE_MCP_TOKEN": TOKEN,
        "MODAL_WORKSPACE_JANITOR_SECONDS": "0",
        "MODAL_WORKSPACE_DATA_ROOT": str(root / "data"),
    }
    if kind == "local":
        async with serving(create_app(open_service(load_settings(env)), [TOKEN])) as url:
            yield url
        return
    plane = ControlPlane(root / "plane").start()
    try:
        os.environ.update(plane.sdk_env())
        # Off the event loop: the SDK's client is closed through its blocking interface.
        await asyncio.to_thread(reset_modal_client)
        plane.publish_image(IMAGE, "im-benchimage000000000")
        settings = load_settings({**env, "MODAL_WORKSPACE_DRIVER": "modal"})
        driver = ModalDriver(ModalSettings(app_name="terminal-bench", default_image_name=IMAGE))
        async with serving(create_app(new_service(driver, settings), [TOKEN])) as url:
            yield url
    finally:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(reset_modal_client)
        plane.stop()


class Shell:
    """A shell opened for a person, with its socket open as its page has it."""

    def __init__(self, base: str, client: httpx2.AsyncClient, ws: str, page: dict[str, Any]):
        self.base, self.client, self.ws = base, client, ws
        self.exec_id = page["exec_id"]
        ticket = page["path"].rsplit("/", 1)[1]
        url = "ws" + base.removeprefix("http") + SOCKET_ROUTE + "?cursor=0"
        self.socket = websocket.create_connection(
            url, timeout=30, subprotocols=[SOCKET_PROTOCOL, f"ticket.{ticket}"], origin=base
        )

    def drain(self, quiet: float = 0.5) -> bytes:
        """What the socket sends until it is quiet for `quiet` seconds."""
        got = b""
        self.socket.settimeout(quiet)
        try:
            while True:
                opcode, data = self.socket.recv_data()
                if opcode == websocket.ABNF.OPCODE_BINARY:
                    got += data[8:]
        except websocket.WebSocketTimeoutException:
            pass
        finally:
            self.socket.settimeout(30)
        return got

    def key_over_socket(self, key: str) -> float:
        start = time.perf_counter()
        self.socket.send(json.dumps({"type": "input", "data": key}))
        while True:
            opcode, data = self.socket.recv_data()
            if opcode == websocket.ABNF.OPCODE_BINARY and key.encode() in data[8:]:
                return time.perf_counter() - start

    async def key_over_rest(self, key: str, cursor: int) -> tuple[float, int]:
        ex = f"/api/workspaces/{self.ws}/realtime-execs/{self.exec_id}"
        start = time.perf_counter()
        sent = await self.client.post(ex + "/input", json={"data": key})
        assert sent.status_code == 200, sent.text
        while True:
            params = {"cursor": cursor, "wait_seconds": 25}
            page = (await self.client.get(ex + "/events", params=params)).json()
            cursor = page["next_cursor"]
            if any(key in (e.get("data") or "") for e in page["events"]):
                return time.perf_counter() - start, cursor


async def rows_for(kind: str, keys: int, execs: int) -> dict[str, list[float]]:
    root = Path(tempfile.mkdtemp(prefix="mcp-", dir="/tmp"))
    try:
        async with gateway(kind, root) as base:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with httpx2.AsyncClient(base_url=base, headers=headers, timeout=60) as client:
                ws = (await client.post("/api/workspaces", json={})).json()["workspace_id"]
                try:
                    return await measure(base, client, ws, keys, execs)
                finally:
                    await client.delete(f"/api/workspaces/{ws}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def measure(
    base: str, client: httpx2.AsyncClient, ws: str, keys: int, execs: int
) -> dict[str, list[float]]:
    page = (await client.post(f"/api/workspaces/{ws}/terminal", json={})).json()
    shell = Shell(base, client, ws, page)
    shell.drain(1.0)  # the prompt
    letters = string.ascii_lowercase
    over_socket = []
    for i in range(keys):
        over_socket.append(shell.key_over_socket(letters[i % len(letters)]))
        if (i + 1) % _CLEAR_EVERY == 0:
            shell.socket.send(json.dumps({"type": "input", "data": "\x15"}))
            shell.drain()
    shell.socket.send(json.dumps({"type": "input", "data": "\x15"}))
    shell.drain()
    shell.socket.close()
    # The REST client reads from the stream's end: what the socket saw is behind it.
    ex = f"/api/workspaces/{ws}/realtime-execs/{page['exec_id']}"
    cursor = (await client.get(ex)).json()["last_seq"]
    over_rest = []
    for i in range(keys):
        took, cursor = await shell.key_over_rest(letters[i % len(letters)], cursor)
        over_rest.append(took)
        if (i + 1) % _CLEAR_EVERY == 0:
            await client.post(ex + "/input", json={"data": "\x15"})
    plain = []
    for _ in range(execs):
        start = time.perf_counter()
        ran = await client.post(f"/api/workspaces/{ws}/exec", json={"command": "true"})
        plain.append(time.perf_counter() - start)
        assert ran.json()["returncode"] == 0, ran.text
    return {
        "keystroke over the terminal socket": over_socket,
        "keystroke over REST (input + events)": over_rest,
        "plain exec round trip (baseline)": plain,
    }


def p95(times: list[float]) -> float:
    return statistics.quantiles(times, n=20)[-1] if len(times) > 1 else times[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--execs", type=int, default=40)
    parser.add_argument("--drivers", nargs="+", default=["local", "modal"])
    args = parser.parse_args()
    print(f"{cpu_model()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print(f"{args.keys} keys, {args.execs} plain execs per driver; milliseconds\n")
    print(f"| {'driver':<6} | {'path':<38} | {'median':>7} | {'p95':>7} | ratio |")
    print(f"|{'-' * 8}|{'-' * 40}|{'-' * 8}:|{'-' * 8}:|{'-' * 6}:|")
    for kind in args.drivers:
        rows = asyncio.run(rows_for(kind, args.keys, args.execs))
        base = statistics.median(rows["plain exec round trip (baseline)"])
        for label, times in rows.items():
            median = statistics.median(times)
            print(
                f"| {kind:<6} | {label:<38} | {median * 1000:>7.1f} | {p95(times) * 1000:>7.1f} "
                f"| {median / base:>5.2f} |"
            )


if __name__ == "__main__":
    main()
