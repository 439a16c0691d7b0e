"""A gateway that dies without closing its channels (killed, out of memory, its container
replaced) leaves nothing running in its workspaces: each channel's `connect` exec ends once the
keepalives its Hello promised stop, so the sandbox can still reach its idle timeout. Against the
test control plane, with the real agent and the real `modal` SDK in a real server process."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import Served, api_client, modal_backend, ok, serve
from modal_control_plane import ControlPlane

pytest.importorskip("modal_workspace_core.drivers.modal.driver")

KEEPALIVE = 1  # seconds: the agent gives up after three missed keepalives


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with contextlib.ExitStack() as stack:
        backend = stack.enter_context(modal_backend("ghp_unused"))
        backend.env["MODAL_WORKSPACE_CHANNEL_KEEPALIVE_SECONDS"] = str(KEEPALIVE)
        yield stack.enter_context(serve(tmp_path, "", backend))


def connects_running(plane: ControlPlane, workspace_id: str) -> list[str]:
    """The `mwc-agent connect` execs still running in the workspace's sandboxes."""
    running = []
    for sandbox in plane.sandboxes():
        if sandbox.name != workspace_id:
            continue
        for exec_id, record in sandbox.execs.items():
            if "connect" in record.argv and record.process.returncode is None:
                running.append(exec_id)
    return running


def test_a_killed_gateway_leaves_no_connect_exec_running(served: Served) -> None:
    plane = served.backend.plane
    assert plane is not None
    with api_client(served) as api:
        ws = ok(api.post("/workspaces", json={}))["workspace_id"]
        assert ok(api.post(f"/workspaces/{ws}/exec", json={"command": "echo hi"}))["stdout"]
    assert connects_running(plane, ws), "the exec went through a channel"
    # A live gateway keeps its quiet channel: keepalives flow, longer than the agent waits.
    time.sleep(KEEPALIVE * 5)
    assert connects_running(plane, ws), "a quiet channel of a live gateway stays open"

    os.killpg(served.pid, signal.SIGKILL)
    killed = time.monotonic()
    while connects_running(plane, ws):
        # Three keepalives and the agent's close; without them it would run for ever.
        assert time.monotonic() - killed < KEEPALIVE * 3 + 10, "connect outlived its gateway"
        time.sleep(0.2)
