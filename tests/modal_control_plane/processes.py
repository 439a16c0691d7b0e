"""Local processes standing in for a sandbox's entrypoint and its execs.

Output is kept whole per pipe so that a reader can start (or resume) at any byte offset, the way
the task command router serves `TaskExecStdioRead`; stdin is written at offsets so retries are safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path

# The largest chunk sent in one stdio message: well under grpclib's default message limit.
CHUNK_BYTES = 64 * 1024


class OutputBuffer:
    """Every byte one process wrote to one pipe, and whether the pipe has closed."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False
        self._changed = asyncio.Condition()

    async def feed_from(self, reader: asyncio.StreamReader | None) -> None:
        try:
            while reader is not None:
                chunk = await reader.read(CHUNK_BYTES)
                if not chunk:
                    break
                async with self._changed:
                    self.data.extend(chunk)
                    self._changed.notify_all()
        finally:
            await self.close()

    async def append(self, data: bytes) -> None:
        async with self._changed:
            self.data.extend(data)
            self._changed.notify_all()

    async def close(self) -> None:
        async with self._changed:
            self.closed = True
            self._changed.notify_all()

    async def read_from(self, offset: int) -> AsyncIterator[bytes]:
        """Chunks from `offset` on, as they arrive, until the pipe closes and all was read."""
        while True:
            async with self._changed:
                while len(self.data) <= offset and not self.closed:
                    await self._changed.wait()
                chunk = bytes(self.data[offset : offset + CHUNK_BYTES])
                closed = self.closed
            if chunk:
                offset += len(chunk)
                yield chunk
            elif closed:
                return


class LocalProcess:
    """One child process in its own session, with whole-output buffers and offset-based stdin."""

    def __init__(self, process: asyncio.subprocess.Process | None) -> None:
        self.process = process
        self.stdout = OutputBuffer()
        self.stderr = OutputBuffer()
        self.stdin_written = 0
        self.stdin_closed = False
        self._stdin_lock = asyncio.Lock()
        self._returncode: int | None = None
        self._exited = asyncio.Event()
        self._pumps: list[asyncio.Task[None]] = []

    @classmethod
    async def spawn(cls, argv: Iterable[str], *, cwd: Path, env: Mapping[str, str]) -> LocalProcess:
        """Start `argv`; a program that cannot be started exits 127 with the reason on stderr,
        as a shell in a container would report it."""
        args = list(argv)
        try:
            process = await asyncio.create_subprocess_exec(
                *args,
                cwd=cwd,
                env=dict(env),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            failed = cls(None)
            await failed.stderr.append(f"{args[0] if args else ''}: {exc.strerror}\n".encode())
            await failed.stdout.close()
            await failed.stderr.close()
            failed.stdin_closed = True
            failed._finish(127)
            return failed
        started = cls(process)
        started._pumps = [
            asyncio.create_task(started.stdout.feed_from(process.stdout)),
            asyncio.create_task(started.stderr.feed_from(process.stderr)),
            asyncio.create_task(started._reap()),
        ]
        return started

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def returncode(self) -> int | None:
        """The exit code, or minus the signal number that ended the process; None while running."""
        return self._returncode

    def _finish(self, returncode: int) -> None:
        self._returncode = returncode
        self._exited.set()

    async def _reap(self) -> None:
        assert self.process is not None
        returncode = await self.process.wait()
        # Output pipes may stay open in grandchildren; the exit status does not wait for them.
        self._finish(returncode)

    async def wait(self) -> int:
        await self._exited.wait()
        assert self._returncode is not None
        return self._returncode

    async def wait_for_output(self) -> None:
        """Wait until both output pipes are closed (every writer, children included, is gone)."""
        await asyncio.gather(*self._pumps[:2], return_exceptions=True)

    async def write_stdin(self, offset: int, data: bytes, eof: bool) -> None:
        """Write `data` meant for stdin position `offset`; bytes already written are skipped, so a
        retried write is harmless. A gap (an offset past what was written) is refused."""
        async with self._stdin_lock:
            if offset > self.stdin_written:
                raise ValueError(
                    f"stdin offset {offset} is past the {self.stdin_written} bytes written"
                )
            fresh = data[self.stdin_written - offset :]
            stdin = self.process.stdin if self.process is not None else None
            if fresh and not self.stdin_closed and stdin is not None:
                try:
                    stdin.write(fresh)
                    await stdin.drain()
                except (BrokenPipeError, ConnectionResetError):
                    self.stdin_closed = True
            self.stdin_written = max(self.stdin_written, offset + len(data))
            if eof and not self.stdin_closed:
                self.stdin_closed = True
                if stdin is not None:
                    with contextlib.suppress(OSError):
                        stdin.close()

    async def close(self) -> None:
        """Kill the process group, reap the process and release its pipes."""
        self.signal_group(signal.SIGKILL)
        if self.process is None:
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.wait(), 10)
        transport = getattr(self.process, "_transport", None)
        if transport is not None:
            transport.close()

    def signal_group(self, signum: int = signal.SIGKILL) -> None:
        if self.process is not None and self._returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signum)
