"""Byte transports for the agent channel: a unix socket, a subprocess's stdin/stdout, or any
asyncio stream pair. A transport only moves bytes; the protocol lives in `AgentChannel`."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

# StreamReader's buffer limit; reads take whatever is available up to the channel's read size.
_STREAM_LIMIT = 1 << 20


class ByteWriter(Protocol):
    """What the client needs of a writer (`asyncio.StreamWriter` has it)."""

    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def close(self) -> None: ...
    def is_closing(self) -> bool: ...


class Transport:
    """A reader and a writer, closed together."""

    def __init__(self, reader: asyncio.StreamReader, writer: ByteWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()
        wait_closed = getattr(self.writer, "wait_closed", None)
        if wait_closed is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(wait_closed(), 2.0)


class SubprocessTransport(Transport):
    """The stdin/stdout of a child process (`mwc-agent connect …`, locally or through an exec).

    Closing ends its stdin, which ends `connect`; a child that lingers is killed.
    """

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        if process.stdout is None or process.stdin is None:
            raise ValueError("the process needs piped stdin and stdout")
        super().__init__(process.stdout, process.stdin)
        self.process = process

    async def close(self) -> None:
        await super().close()
        try:
            await asyncio.wait_for(self.process.wait(), 2.0)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()


Connector = Callable[[], Awaitable[Transport]]


async def open_unix(path: str | os.PathLike[str]) -> Transport:
    """Connects to the agent's unix socket."""
    reader, writer = await asyncio.open_unix_connection(os.fspath(path), limit=_STREAM_LIMIT)
    return Transport(reader, writer)


async def open_subprocess(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> SubprocessTransport:
    """Starts `argv` with piped stdin/stdout (stderr is inherited, for its diagnostics)."""
    if not argv:
        raise ValueError("argv must name a program")
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=dict(env) if env is not None else None,
        limit=_STREAM_LIMIT,
    )
    return SubprocessTransport(process)
