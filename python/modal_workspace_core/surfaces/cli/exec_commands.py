"""`exec` and `logs`: a command run as a realtime exec, its output written to this terminal's
stdout and stderr as it arrives and its exit status made this process's; an exec's output
printed, or followed to its end.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import sys
from collections.abc import Mapping
from typing import Any

from .contract import Client
from .output import Output
from .streams import EXEC_EVENTS, NO_EXIT_CODE, event_bytes, exit_status, pages

__all__ = ["NO_EXIT_CODE", "exec_command", "logs"]

# How long a command stopped by Ctrl+C has between SIGTERM and SIGKILL.
_CANCEL_GRACE_SECONDS = 2.0


class Collected:
    """An exec's output: written through as it arrives, or kept for one JSON document."""

    def __init__(self, keep: bool, events: bool = False) -> None:
        self.keep = keep
        self.streams: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        # Every event as read, for a document that lists them (`logs --json`).
        self.events: list[dict[str, Any]] | None = [] if keep and events else None

    def take(self, page: Mapping[str, Any]) -> None:
        for event in page.get("events") or ():
            kind = event.get("type")
            if self.events is not None:
                self.events.append(event)
            if kind not in self.streams:
                continue
            data = event_bytes(event)
            if self.keep:
                self.streams[kind] += data
            else:
                sink = sys.stdout.buffer if kind == "stdout" else sys.stderr.buffer
                sink.write(data)
                sink.flush()

    def texts(self) -> dict[str, str]:
        """stdout and stderr as text; bytes that are not UTF-8 also as `*_b64`."""
        out: dict[str, str] = {}
        for name, data in self.streams.items():
            try:
                out[name] = data.decode()
            except UnicodeDecodeError:
                out[name] = data.decode(errors="replace")
                out[f"{name}_b64"] = base64.b64encode(data).decode()
        return out


async def exec_command(
    client: Client, out: Output, workspace_id: str, start: Mapping[str, Any]
) -> int:
    """Runs `start` (`workspace_realtime_exec_start`'s fields) and follows it to its end; the
    command's exit status. Ctrl+C cancels the command, then ends this one."""
    status = await client.call(
        "workspace_realtime_exec_start", {"workspace_id": workspace_id, **start}
    )
    exec_id = str(status["exec_id"])
    collected = Collected(keep=out.json_mode)
    ids = {"workspace_id": workspace_id, "exec_id": exec_id}
    page: dict[str, Any] = {}
    try:
        async for page in pages(client, EXEC_EVENTS, ids):
            collected.take(page)
    except asyncio.CancelledError:
        # Ctrl+C: the command should stop too, not go on unwatched.
        with contextlib.suppress(Exception):
            await client.call(
                "workspace_realtime_exec_cancel", {**ids, "grace_seconds": _CANCEL_GRACE_SECONDS}
            )
        raise
    return await _ended(client, out, ids, page, collected)


async def logs(client: Client, out: Output, workspace_id: str, exec_id: str, follow: bool) -> int:
    """Prints an exec's output so far (0), or follows it to its end (its exit status)."""
    ids = {"workspace_id": workspace_id, "exec_id": exec_id}
    collected = Collected(keep=out.json_mode, events=True)
    page: dict[str, Any] = {}
    async for page in pages(client, EXEC_EVENTS, ids, follow=follow):
        collected.take(page)
    if follow:
        return await _ended(client, out, ids, page, collected)
    if out.json_mode:
        out.result(_document(ids, page, collected), "")
    return 0


async def _ended(
    client: Client,
    out: Output,
    ids: Mapping[str, str],
    page: Mapping[str, Any],
    collected: Collected,
) -> int:
    """The exit status of an exec that has ended (its last page read), its document printed
    with `--json`, and why it has no exit code when it has none."""
    code = exit_status(page.get("returncode"))
    document = _document(ids, page, collected)
    if page.get("returncode") is None:
        status = await client.call("workspace_realtime_exec_status", ids)
        document["error"] = status.get("error")
        reason = status.get("error") or f"it ended {status.get('state')} without an exit code"
        out.note(f"modal-workspace: {ids['exec_id']}: {reason}")
        code = NO_EXIT_CODE
    if out.json_mode:
        out.result(document, "")
    return code


def _document(
    ids: Mapping[str, str], page: Mapping[str, Any], collected: Collected
) -> dict[str, Any]:
    document: dict[str, Any] = {
        **ids,
        "state": page.get("state"),
        "returncode": page.get("returncode"),
        "done": bool(page.get("done")),
        **collected.texts(),
    }
    if collected.events is not None:
        document["events"] = collected.events
    return document
