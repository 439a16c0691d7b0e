"""Run commands in a workspace through its agent channel, to their end, for tests."""

from __future__ import annotations

import base64
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modal_workspace_core.agent_client import AgentClient


async def run(client: AgentClient, command: str, **args: Any) -> tuple[str, dict[str, Any]]:
    """Run `command` (text for `bash -lc`) to its end: its output and its `exit` event."""
    status, _ = await client.request("exec.start", {"command": command, **args})
    return await drain(client, status["exec_id"])


async def drain(
    client: AgentClient, exec_id: str, timeout: float = 120.0
) -> tuple[str, dict[str, Any]]:
    """Read an exec's events from the start to its `exit` event: its output and that event."""
    output: list[str] = []
    cursor = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page = await client.read_events(exec_id, cursor, wait_seconds=5.0)
        for event in page.events:
            if event["type"] in ("stdout", "stderr"):
                data = event.get("data")
                if data is None:
                    data = base64.b64decode(event["data_b64"]).decode(errors="replace")
                output.append(data)
            elif event["type"] == "exit":
                return "".join(output), event
        cursor = page.next_cursor
    raise AssertionError(f"{exec_id} did not end within {timeout} s")
