"""A realtime exec on a pseudo-terminal on the Modal driver (the real SDK against the test
control plane): the same agent inside the sandbox opens the terminal, resizes it and reads it."""

from __future__ import annotations

import asyncio

from modal_control_plane import modal_control_plane
from modal_service_support import allowed_secrets, idle_seconds, needs_container_paths, workspaces
from modal_workspace_core.surfaces.python_client import Workspaces

# The fixtures, imported for pytest to find.
__all__ = ["allowed_secrets", "idle_seconds", "modal_control_plane", "workspaces"]

pytestmark = needs_container_paths


async def test_a_pty_exec_in_a_sandbox_is_resized_and_reads_typed_input(
    workspaces: Workspaces,
) -> None:
    ws = await workspaces.create()
    command = "tty; echo $TERM; stty size; read -r line; stty size; echo got:$line"
    started = await ws.realtime_exec_start(command, pty={"rows": 24, "cols": 80})
    text, cursor = "", 0

    async def read_until(needle: str) -> None:
        nonlocal text, cursor
        async with asyncio.timeout(60):
            while needle not in text:
                page = await ws.realtime_exec_events(started.exec_id, cursor=cursor, wait_seconds=5)
                text += "".join(e.data or "" for e in page.events if e.type == "stdout")
                cursor = page.next_cursor
                assert not page.done or needle in text, text

    await read_until("24 80")
    resized = await ws.realtime_exec_resize(started.exec_id, rows=50, cols=132)
    assert (resized.rows, resized.cols) == (50, 132)
    await ws.realtime_exec_input(started.exec_id, data="typed\n")
    await read_until("got:typed")
    lines = text.replace("\r\n", "\n").splitlines()
    assert lines[0].startswith("/dev/pts/"), lines
    assert lines[1:] == ["xterm-256color", "24 80", "typed", "50 132", "got:typed"]
    status = await ws.realtime_exec_status(started.exec_id)
    assert status.pty == {"rows": 50, "cols": 132}
