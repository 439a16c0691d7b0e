"""The relay between a terminal page's WebSocket and one exec, over the agent channel the
gateway already holds: the exec's output read from the page's cursor (the same long-poll as
`workspace_realtime_exec_events`) and sent on as it comes; keystrokes and the window's size
sent in through `workspace_realtime_exec_input` and `workspace_realtime_exec_resize`, for a
write ticket only. Every step is an operation call, with the checks and errors a REST client gets.

What the socket carries (docs/terminal.md):
- to the page, binary: 8 bytes of the cursor after it (big-endian), then output bytes;
- to the page, text (JSON): `state` (with `returncode` once it ended; the first also says
  whether the exec has a `pty`), `size` (the PTY's rows and cols), `ticket` (a fresh one to
  reconnect or reload with), `error`;
- from the page, text (JSON): `input` (`data`, `encoding` utf-8 or base64), `resize` (`rows`,
  `cols`). A watching page that sends either is closed (1008): it may not type.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
import time
from typing import Any

from pydantic import BaseModel
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from ...errors import WorkspaceError
from ...operations import operation, parse_input, run
from ...operations.exec_engine import event_bytes
from ...operations.machinery import tickets
from ...operations.machinery.pages import PageResult
from ...operations.terminal import TICKET_SECONDS, purpose_of
from ...runtime.service import Service

__all__ = ["CLOSE_ENDED", "CLOSE_READ_ONLY", "RENEW_SECONDS", "TerminalRelay"]

# How often an open page is handed a fresh ticket: well within a ticket's life, so the page
# always holds a live one to reconnect (or reload) with.
RENEW_SECONDS = 60
# One page of output: what a burst (a `cat` of a large file) moves per read.
_PAGE_BYTES = 262_144
_WAIT_SECONDS = 25
# The longest message a page sends: a paste of up to this much text.
_MAX_MESSAGE_CHARS = 1_048_576
# A read that answers empty at once (the server is stopping its long-polls) is not repeated
# sooner than this.
_EMPTY_PAUSE = 0.25
CLOSE_ENDED = 1000
CLOSE_READ_ONLY = 1008
_CLOSE_UNEXPECTED = 1003
_CLOSE_TOO_BIG = 1009
_CLOSE_FAILED = 1011
_OUTPUT = frozenset({"stdout", "stderr"})


class TerminalRelay:
    """One page's socket to one exec, for as long as both last."""

    def __init__(
        self,
        service: Service,
        socket: WebSocket,
        grant: tickets.Grant,
        *,
        write: bool,
        cursor: int,
    ) -> None:
        self.service = service
        self.socket = socket
        self.workspace_id = grant.workspace_id
        self.exec_id = grant.object_id
        self.write = write
        self.cursor = cursor
        self._sending = asyncio.Lock()

    async def run(self) -> None:
        """Relays until the exec has ended (and the page has all of its output), the page
        goes, or the page breaks the rules; then closes the socket."""
        tasks = [
            asyncio.create_task(self._output()),
            asyncio.create_task(self._input()),
            asyncio.create_task(self._renew()),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, OSError):
                    await task
            await self._close(CLOSE_ENDED)

    # --- exec -> page ----------------------------------------------------------------------

    async def _output(self) -> None:
        try:
            status = await self._op("workspace_realtime_exec_status", {})
            shown = status.model_dump()
            pty = shown.get("pty")
            # An exec without a terminal writes bare line feeds, which the page then turns
            # into new lines itself.
            await self._send_json({"type": "state", **_state(shown), "pty": bool(pty)})
            if isinstance(pty, dict):
                await self._send_json({"type": "size", **pty})
            state = shown.get("state")
            while True:
                asked = time.monotonic()
                page = await self._events()
                chunks = [event_bytes(e) for e in page.events if e.get("type") in _OUTPUT]
                if page.cursor_expired:
                    lost = f"\r\n[{page.dropped_bytes} bytes of earlier output were dropped]\r\n"
                    chunks.insert(0, lost.encode())
                if page.next_cursor != self.cursor or chunks:
                    self.cursor = page.next_cursor
                    await self._send(struct.pack(">Q", self.cursor) + b"".join(chunks))
                if page.state != state or page.done:
                    state = page.state
                    ended = {"state": state, "returncode": page.returncode}
                    await self._send_json({"type": "state", **ended, "ended": page.done})
                if page.done:
                    return
                if not page.events and time.monotonic() - asked < _EMPTY_PAUSE:
                    await asyncio.sleep(_EMPTY_PAUSE)
        except WorkspaceError as err:
            await self._send_json({"type": "error", "message": err.message})
            await self._close(_CLOSE_FAILED)

    async def _events(self) -> Any:
        op = operation("workspace_realtime_exec_events")
        args = {
            "workspace_id": self.workspace_id,
            "exec_id": self.exec_id,
            "cursor": self.cursor,
            "wait_seconds": _WAIT_SECONDS,
            "max_bytes": _PAGE_BYTES,
        }
        result = await run(self.service, op, parse_input(op, args))
        assert isinstance(result, PageResult)
        return result.page

    # --- page -> exec ----------------------------------------------------------------------

    async def _input(self) -> None:
        while True:
            message = await self.socket.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None or len(text) > _MAX_MESSAGE_CHARS:
                code = _CLOSE_UNEXPECTED if text is None else _CLOSE_TOO_BIG
                await self._close(code)
                return
            try:
                asked = json.loads(text)
            except ValueError:
                asked = None
            kind = asked.get("type") if isinstance(asked, dict) else None
            if kind not in ("input", "resize"):
                await self._close(_CLOSE_UNEXPECTED)
                return
            if not self.write:
                # The page was opened to watch: nothing it sends reaches the exec.
                await self._close(CLOSE_READ_ONLY, "this page only watches: it cannot type")
                return
            try:
                if kind == "input":
                    await self._type(asked)
                else:
                    await self._resize(asked)
            except WorkspaceError as err:
                await self._send_json({"type": "error", "message": err.message})

    async def _type(self, asked: dict[str, Any]) -> None:
        fields: dict[str, Any] = {k: asked[k] for k in ("data", "encoding") if k in asked}
        await self._op("workspace_realtime_exec_input", fields)

    async def _resize(self, asked: dict[str, Any]) -> None:
        # A size asked for while the exec still starts is the size its terminal opens with.
        size = {k: asked.get(k) for k in ("rows", "cols")}
        resized = (await self._op("workspace_realtime_exec_resize", size)).model_dump()
        await self._send_json({"type": "size", "rows": resized["rows"], "cols": resized["cols"]})

    # --- tickets ---------------------------------------------------------------------------

    async def _renew(self) -> None:
        purpose = purpose_of(self.write)
        while True:
            ticket = tickets.mint(
                self.service.settings, purpose, self.workspace_id, self.exec_id, TICKET_SECONDS
            )
            await self._send_json(
                {"type": "ticket", "ticket": ticket.value, "expires_at": ticket.expires}
            )
            await asyncio.sleep(RENEW_SECONDS)

    # --- the socket ------------------------------------------------------------------------

    async def _op(self, name: str, args: dict[str, Any]) -> BaseModel:
        op = operation(name)
        full = {"workspace_id": self.workspace_id, "exec_id": self.exec_id, **args}
        result = await run(self.service, op, parse_input(op, full))
        assert isinstance(result, BaseModel)
        return result

    async def _send(self, data: bytes) -> None:
        async with self._sending:
            await self.socket.send_bytes(data)

    async def _send_json(self, message: dict[str, Any]) -> None:
        async with self._sending:
            await self.socket.send_text(json.dumps(message))

    async def _close(self, code: int, reason: str = "") -> None:
        if self.socket.application_state == WebSocketState.CONNECTED:
            with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
                async with self._sending:
                    await self.socket.close(code, reason)


def _state(status: dict[str, Any]) -> dict[str, Any]:
    return {"state": status.get("state"), "returncode": status.get("returncode"), "ended": False}
