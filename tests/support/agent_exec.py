"""Run commands in a workspace through its agent channel, to their end, for tests."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from modal_workspace_core.channel.client import AgentClient


@dataclass
class Finished:
    """An exec read to its end: its output by stream, and its `exit` event."""

    stdout: str
    stderr: str
    exit: dict[str, Any]


async def run(client: AgentClient, command: str, **args: Any) -> Finished:
    """Run `command` (text for `bash -lc`) to its end."""
    status, _ = await client.request("exec.start", {"command": command, **args})
    return await drain(client, status["exec_id"])


async def drain(client: AgentClient, exec_id: str, timeout: float = 120.0) -> Finished:
    """Read an exec's events from the start to its `exit` event."""
    output: dict[str, list[str]] = {"stdout": [], "stderr": []}
    cursor = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page = await client.read_events(exec_id, cursor, wait_seconds=5.0)
        for event in page.events:
            if event["type"] in output:
                data = event.get("data")
                if data is None:
                    data = base64.b64decode(event["data_b64"]).decode(errors="replace")
                output[event["type"]].append(data)
            elif event["type"] == "exit":
                return Finished("".join(output["stdout"]), "".join(output["stderr"]), event)
        cursor = page.next_cursor
    raise AssertionError(f"{exec_id} did not end within {timeout} s")
