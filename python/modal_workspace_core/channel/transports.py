"""Byte transports for the agent channel: a unix socket, a subprocess's stdin/stdout, a Modal
exec (in `drivers.modal_channel`), or any asyncio stream pair. A transport only moves bytes; the
protocol lives in `AgentChannel`.

Transports push what they read (`attach`): each read goes to the client as soon as it arrives,
with no `asyncio.StreamReader` (a copy in and a copy out) and no reader task (a wake-up per read)
in between. The unix socket reads into one reused buffer, so a flood of output costs no new bytes
object and no fresh memory per read either (those copies and page faults were a fifth of the
client's time); a subprocess's pipe and a Modal exec hand over the bytes objects asyncio and the
SDK already made. Only a stream pair given to `AgentClient.connect_stream` is still read through
its `StreamReader` (pulled)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

# The buffer a pushed socket reads into: large enough to carry many pages when the agent is
# busy (the socket read size asyncio uses too).
_PUSH_BUFFER = 256 * 1024

# How long closing a subprocess waits for it to exit on its own before killing it.
_EXIT_SECONDS = 2.0

OnData = Callable[[memoryview], None]
OnLost = Callable[[Exception | None], None]


class ByteWriter(Protocol):
    """What the client needs of a writer (`asyncio.StreamWriter` has it)."""

    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def close(self) -> None: ...
    def is_closing(self) -> bool: ...


class PushedReads:
    """The reading side of a pushed transport: what was read goes to the consumer in order, and
    the end once, after all of it.

    Reads that come before a consumer attaches (the agent's Hello comes at once) are held and
    handed over first when it does; so is an end that came before it.
    """

    def __init__(self) -> None:
        self._on_data: OnData | None = None
        self._on_lost: OnLost | None = None
        self._early: list[bytes] = []
        self._end: tuple[Exception | None] | None = None

    def attach(self, on_data: OnData, on_lost: OnLost) -> None:
        if self._on_data is not None:
            raise RuntimeError("a transport has one consumer")
        self._on_data, self._on_lost = on_data, on_lost
        early, self._early = self._early, []
        for data in early:
            on_data(memoryview(data))
        if self._end is not None:
            on_lost(self._end[0])

    def data(self, data: bytes | memoryview) -> None:
        """One read. A view is only valid during the call: it is copied if it must be held."""
        if self._end is not None:
            return
        if self._on_data is not None:
            self._on_data(data if isinstance(data, memoryview) else memoryview(data))
        else:
            self._early.append(data if isinstance(data, bytes) else bytes(data))

    def end(self, exc: Exception | None) -> None:
        """The end of the reads, normal (None) or not; only the first end counts."""
        if self._end is not None:
            return
        self._end = (exc,)
        if self._on_lost is not None:
            self._on_lost(exc)


class _WriteFlow:
    """The flow control a writer's `drain` needs over an asyncio write transport: asyncio calls
    `pause`/`resume` at its buffer's high and low water marks, and `lost` when the peer is gone."""

    def __init__(self, loop: asyncio.AbstractEventLoop, what: str) -> None:
        self._loop = loop
        self._what = what
        self._writable: asyncio.Future[None] | None = None
        self._lost = False

    def pause(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = self._loop.create_future()

    def resume(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def lost(self) -> None:
        self._lost = True
        self.resume()

    async def drain(self) -> None:
        if self._lost:
            raise ConnectionResetError(f"{self._what} is closed")
        if self._writable is not None and not self._writable.done():
            await self._writable
            if self._lost:
                raise ConnectionResetError(f"{self._what} is closed")


class Transport:
    """A reader and a writer, closed together. A transport that pushes has no reader."""

    def __init__(self, reader: asyncio.StreamReader | None, writer: ByteWriter) -> None:
        self.reader = reader
        self.writer = writer

    def attach(self, on_data: OnData, on_lost: OnLost) -> bool:
        """Pushes what arrives to `on_data` (a view valid only during the call) and the end of
        the transport to `on_lost`, if this transport pushes; False when it is read through
        `reader` instead."""
        return False

    async def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()
        wait_closed = getattr(self.writer, "wait_closed", None)
        if wait_closed is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(wait_closed(), 2.0)


class PushedTransport(Transport):
    """A transport whose reads are pushed to the client (see the module's notes)."""

    def __init__(self, reads: PushedReads, writer: ByteWriter) -> None:
        super().__init__(None, writer)
        self._reads = reads

    def attach(self, on_data: OnData, on_lost: OnLost) -> bool:
        self._reads.attach(on_data, on_lost)
        return True


# --- a unix socket ------------------------------------------------------------------------------


class _SocketProtocol(asyncio.BufferedProtocol):
    """A socket read into one reused buffer, each read pushed at once; and the flow control its
    writer's `drain` needs."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._view = memoryview(bytearray(_PUSH_BUFFER))
        self.reads = PushedReads()
        self.flow = _WriteFlow(loop, "the agent's socket")
        self.transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        self.reads.data(self._view[:nbytes])

    def eof_received(self) -> bool:
        return False  # the transport closes itself; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        self.flow.lost()
        self.reads.end(exc)

    def pause_writing(self) -> None:
        self.flow.pause()

    def resume_writing(self) -> None:
        self.flow.resume()


class _SocketWriter:
    """The writer of a pushed socket: asyncio's own write buffer, drained on its flow control."""

    def __init__(self, protocol: _SocketProtocol) -> None:
        self._protocol = protocol

    def _transport(self) -> asyncio.Transport:
        transport = self._protocol.transport
        assert transport is not None, "connection_made comes before the connection is returned"
        return transport

    def write(self, data: bytes) -> None:
        self._transport().write(data)

    async def drain(self) -> None:
        await self._protocol.flow.drain()

    def close(self) -> None:
        self._transport().close()

    def is_closing(self) -> bool:
        return self._transport().is_closing()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._protocol.closed)


# Checks the process at the other end of a connected unix socket (`SO_PEERCRED`) and raises
# OSError when it is not the agent expected there.
PeerCheck = Callable[[socket.socket], None]


async def open_unix(path: str | os.PathLike[str], check: PeerCheck | None = None) -> Transport:
    """Connects to the agent's unix socket; `check` vets the listening process before a byte is
    sent."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await loop.sock_connect(sock, os.fspath(path))
        if check is not None:
            check(sock)
        _, protocol = await loop.create_unix_connection(lambda: _SocketProtocol(loop), sock=sock)
    except BaseException:
        sock.close()
        raise
    return PushedTransport(protocol.reads, _SocketWriter(protocol))


# --- a subprocess -------------------------------------------------------------------------------


class _SubprocessProtocol(asyncio.SubprocessProtocol):
    """A child's stdout pushed as asyncio reads it, the flow control of its stdin, and its exit.

    The end of the reads is the end of stdout: a child that exits has still written what the
    pipe holds, and asyncio reads the pipe to its end before reporting it closed.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.reads = PushedReads()
        self.flow = _WriteFlow(loop, "the agent process's stdin")
        self.exited: asyncio.Future[None] = loop.create_future()
        self._transport: asyncio.SubprocessTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self._transport = transport

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self.reads.data(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 0:
            self.flow.lost()
        elif fd == 1:
            self.reads.end(exc)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        # Every pipe is closed and the child has exited: release the transport (asyncio warns
        # of a subprocess transport nobody closed).
        self.flow.lost()
        self.reads.end(exc)
        if self._transport is not None:
            self._transport.close()

    def pause_writing(self) -> None:
        self.flow.pause()

    def resume_writing(self) -> None:
        self.flow.resume()


class _StdinWriter:
    """A child's stdin: asyncio's pipe write buffer, drained on its flow control; closing it
    sends EOF once what is buffered has been written."""

    def __init__(self, stdin: asyncio.WriteTransport, flow: _WriteFlow) -> None:
        self._stdin = stdin
        self._flow = flow

    def write(self, data: bytes) -> None:
        self._stdin.write(data)

    async def drain(self) -> None:
        await self._flow.drain()

    def close(self) -> None:
        self._stdin.close()

    def is_closing(self) -> bool:
        return self._stdin.is_closing()


class SubprocessTransport(PushedTransport):
    """The stdin/stdout of a child process (`mwc-agent connect …`, locally or through an exec),
    its stdout pushed. `process` is asyncio's transport of the child (`send_signal`, `kill`,
    `get_pid`, `get_returncode`).

    Closing ends its stdin, which ends `connect`; a child that lingers is killed.
    """

    def __init__(self, process: asyncio.SubprocessTransport, protocol: _SubprocessProtocol) -> None:
        stdin = process.get_pipe_transport(0)
        if not isinstance(stdin, asyncio.WriteTransport) or process.get_pipe_transport(1) is None:
            raise ValueError("the process needs piped stdin and stdout")
        super().__init__(protocol.reads, _StdinWriter(stdin, protocol.flow))
        self.process = process
        self._exited = protocol.exited

    async def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()
        try:
            await asyncio.wait_for(asyncio.shield(self._exited), _EXIT_SECONDS)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await asyncio.shield(self._exited)
        # Closes the pipes a grandchild may still hold open.
        self.process.close()


async def open_subprocess(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> SubprocessTransport:
    """Starts `argv` with piped stdin/stdout (stderr is inherited, for its diagnostics)."""
    if not argv:
        raise ValueError("argv must name a program")
    loop = asyncio.get_running_loop()
    process, protocol = await loop.subprocess_exec(
        lambda: _SubprocessProtocol(loop),
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=None,
        env=dict(env) if env is not None else None,
    )
    return SubprocessTransport(process, protocol)


Connector = Callable[[], Awaitable[Transport]]
