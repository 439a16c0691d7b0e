"""`shell`: an interactive shell in a workspace, in this terminal. The shell is a realtime exec on a
pseudo-terminal the size of this one (`bash -l`, else `sh`, in /workspace); this terminal is put
in raw mode so that every key (Ctrl+C, arrows, Tab) goes to the shell as it is typed, the
shell's output is written here as it comes, a resize of this terminal (SIGWINCH) resizes the
shell's, and the terminal is restored however the session ends. The exit status is the shell's.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import sys
import termios
import tty
from collections.abc import Iterator
from typing import Any

from ...errors import InvalidArgumentError, WorkspaceError
from .contract import Client
from .output import Output
from .streams import EXEC_EVENTS, NO_EXIT_CODE, event_bytes, exit_status, pages

__all__ = ["shell"]

# bash as a login shell where the workspace has it, else the POSIX shell.
SHELL = "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi"
# A terminal that reports no size (0 by 0) gets the classic one.
_DEFAULT_SIZE = (24, 80)
# The most one input call carries: keys typed faster than a round trip travel together.
_INPUT_CHUNK = 16 * 1024


def terminal_size(fd: int) -> tuple[int, int]:
    """(rows, cols) of the terminal on `fd`, within what a workspace's PTY takes."""
    try:
        size = os.get_terminal_size(fd)
        rows, cols = size.lines, size.columns
    except OSError:
        rows, cols = 0, 0
    if rows <= 0 or cols <= 0:
        rows, cols = _DEFAULT_SIZE
    return min(rows, 500), min(cols, 1000)


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """The terminal on `fd` in raw mode for the block, its settings restored after it."""
    saved = termios.tcgetattr(fd)
    try:
        # At once, keeping what was typed ahead (the default flushes it): it is the shell's.
        tty.setraw(fd, termios.TCSANOW)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def shell(client: Client, out: Output, workspace_id: str) -> int:
    stdin = sys.stdin.fileno()
    if not os.isatty(stdin):
        raise InvalidArgumentError("shell needs a terminal on its stdin: use exec to run a command")
    ids = {"workspace_id": workspace_id, "exec_id": await _start(client, out, workspace_id, stdin)}
    session = _Session(client, ids)
    loop = asyncio.get_running_loop()
    follower = loop.create_task(_follow(client, ids, sys.stdout.fileno()))
    ended_by: list[int] = []

    def stop(signum: int) -> None:
        ended_by.append(signum)
        follower.cancel()

    with raw_mode(stdin):
        loop.add_reader(stdin, session.typed, stdin)
        loop.add_signal_handler(signal.SIGWINCH, session.resized, stdin)
        # The terminal closed, or the process was told to stop: the shell ends too.
        for signum in (signal.SIGHUP, signal.SIGTERM):
            loop.add_signal_handler(signum, stop, signum)
        sender = loop.create_task(session.send())
        try:
            page = await follower
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await client.call("workspace_realtime_exec_cancel", {**ids, "grace_seconds": 1})
            if not ended_by:
                raise
            return 128 + ended_by[0]
        finally:
            loop.remove_reader(stdin)
            for signum in (signal.SIGWINCH, signal.SIGHUP, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
    returncode = page.get("returncode")
    if returncode is None:
        out.note(f"modal-workspace: the shell ended {page.get('state')} without an exit code")
        return NO_EXIT_CODE
    return exit_status(int(returncode))


async def _start(client: Client, out: Output, workspace_id: str, stdin: int) -> str:
    """The shell's exec, on a pseudo-terminal the size of this one; its id."""
    rows, cols = terminal_size(stdin)
    start = {"workspace_id": workspace_id, "command": SHELL, "pty": {"rows": rows, "cols": cols}}
    try:
        started = await client.call("workspace_realtime_exec_start", start)
    except InvalidArgumentError as exc:
        if exc.field != "pty":
            raise
        # A gateway from before terminal sizes: its own (24 by 80), which does not follow this.
        out.note("modal-workspace: this gateway sets no terminal size: the shell's is 24x80")
        started = await client.call("workspace_realtime_exec_start", {**start, "pty": True})
    return str(started["exec_id"])


async def _follow(client: Client, ids: dict[str, str], fd: int) -> dict[str, Any]:
    """The shell's output written to `fd` as it comes; the last page, once it has ended."""
    page: dict[str, Any] = {}
    async for page in pages(client, EXEC_EVENTS, ids):
        for event in page.get("events") or ():
            if event.get("type") in ("stdout", "stderr"):
                os.write(fd, event_bytes(event))
    return page


class _Session:
    """The keys typed and the sizes set while a shell runs, sent in order, one call at a time."""

    def __init__(self, client: Client, ids: dict[str, str]) -> None:
        self._client = client
        self._ids = ids
        self._keys = bytearray()
        self._size: tuple[int, int] | None = None
        self._wake = asyncio.Event()

    def typed(self, fd: int) -> None:
        try:
            data = os.read(fd, _INPUT_CHUNK)
        except OSError:
            data = b""
        if not data:  # the terminal is gone: nothing more will be typed
            asyncio.get_running_loop().remove_reader(fd)
            return
        self._keys += data
        self._wake.set()

    def resized(self, fd: int) -> None:
        self._size = terminal_size(fd)
        self._wake.set()

    async def send(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._size is not None:
                rows, cols = self._size
                self._size = None
                # An exec that just ended refuses a resize: its output says the rest.
                with contextlib.suppress(WorkspaceError):
                    await self._client.call(
                        "workspace_realtime_exec_resize", {**self._ids, "rows": rows, "cols": cols}
                    )
            while self._keys:
                chunk = bytes(self._keys[:_INPUT_CHUNK])
                del self._keys[: len(chunk)]
                data = base64.b64encode(chunk).decode()
                with contextlib.suppress(WorkspaceError):
                    await self._client.call(
                        "workspace_realtime_exec_input",
                        {**self._ids, "data": data, "encoding": "base64"},
                    )
