"""The terminal page's relay on the Modal driver (the real SDK against the test control plane,
the real agent in the sandbox): a shell opened by `workspace_terminal_url` takes keystrokes and
a resize over the page's WebSocket and answers over it, through the same agent channel the
gateway uses for every other operation."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
import websocket
from modal_control_plane import ControlPlane, modal_control_plane
from modal_control_plane.isolation import usable_bwrap
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings
from modal_workspace_core.operations import new_service
from modal_workspace_core.surfaces.rest.app import create_app
from modal_workspace_core.surfaces.rest.terminal_page import SOCKET_PROTOCOL, SOCKET_ROUTE
from service_support import TOKEN, serving

__all__ = ["modal_control_plane"]

IMAGE = "terminal-test-image"


@pytest.fixture
async def base(modal_control_plane: ControlPlane, tmp_path: Path) -> AsyncIterator[str]:
    if not usable_bwrap():
        pytest.skip("bubblewrap does not work here (.ci/run installs it)")
    modal_control_plane.publish_image(IMAGE, "im-terminaltestimage00")
    settings = load_settings(
        {
            "MODAL_WORKSPACE_DRIVER": "modal",
            "MODAL_WORKSPACE_MCP_TOKEN": TOKEN,
            "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "data"),
            "MODAL_WORKSPACE_JANITOR_SECONDS": "0",
        }
    )
    driver = ModalDriver(ModalSettings(app_name="terminal-tests", default_image_name=IMAGE))
    async with serving(create_app(new_service(driver, settings), [TOKEN])) as url:
        yield url
    await driver.close()


def until(sock: websocket.WebSocket, wanted: bytes) -> bytes:
    """The output the socket sends until `wanted` is in it."""
    output, deadline = b"", time.monotonic() + 30
    while wanted not in output:
        assert time.monotonic() < deadline, output
        opcode, data = sock.recv_data()
        if opcode == websocket.ABNF.OPCODE_BINARY:
            output += data[8:]
    return output


async def test_a_shell_on_modal_takes_keys_and_a_resize_over_the_socket(base: str) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(base_url=base, headers=headers, timeout=120) as client:
        ws = (await client.post("/api/workspaces", json={})).json()["workspace_id"]
        page = (await client.post(f"/api/workspaces/{ws}/terminal", json={})).json()
        ticket = page["path"].rsplit("/", 1)[1]
        sock = websocket.create_connection(
            "ws" + base.removeprefix("http") + SOCKET_ROUTE + "?cursor=0",
            timeout=30,
            subprotocols=[SOCKET_PROTOCOL, f"ticket.{ticket}"],
            origin=base,
        )
        try:
            # Sent at once, while the shell may still be starting: the relay applies the size
            # once the exec runs.
            sock.send(json.dumps({"type": "resize", "rows": 33, "cols": 101}))
            sock.send(json.dumps({"type": "input", "data": "echo $((40 + 2)) $(stty size)\r"}))
            until(sock, b"42 33 101")
        finally:
            sock.close()
        await client.delete(f"/api/workspaces/{ws}")
