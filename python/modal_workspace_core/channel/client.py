"""The gateway's asyncio client of the workspace agent: one channel over any byte transport,
requests with futures, and a per-stream cache that long-polls are served and woken from."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .._core import AgentChannel, ChannelRefusal, Page
from ..errors import AgentError
from .log_reads import AgentLog
from .stream_waiters import StreamWaiters
from .transports import Connector, PeerCheck, Transport, open_subprocess, open_unix

__all__ = ["AgentClient", "AgentError"]

# One read per crossing into Rust: large enough to carry many pages when the agent is busy.
_READ_BYTES = 256 * 1024

# How long `connect_*` waits for the agent's Hello.
_HELLO_TIMEOUT = 10.0

# How long a request waits for its answer unless told otherwise (`AgentClient.request_timeout`):
# an agent that stopped answering must not hold its caller forever.
DEFAULT_REQUEST_TIMEOUT = 60.0


class AgentClient:
    """One channel to one workspace agent. Make it with a `connect_*` class method.

    All methods must be called from the event loop that connected it. What the transport reads
    is fed to the channel as it arrives (pushed by the transport, or read by a background task
    from a stream pair), which resolves futures and wakes readers; callers only write.
    """

    def __init__(self, channel: AgentChannel, connector: Connector | None) -> None:
        self._channel = channel
        self._connector = connector
        self._loop = asyncio.get_running_loop()
        self._transport: Transport | None = None
        self._pump: asyncio.Task[None] | None = None
        # Closing transports that ended or were given up on (a subprocess is waited for).
        self._releasing: set[asyncio.Task[None]] = set()
        self._hello: asyncio.Future[None] | None = None
        self._info: dict[str, Any] = {}
        self._pending: dict[int, asyncio.Future[tuple[dict[str, Any], bytes]]] = {}
        self._subscribing: dict[str, asyncio.Future[tuple[dict[str, Any], bytes]]] = {}
        self._waiters = StreamWaiters(self._loop)
        # Counts `end_waits` calls: a read that began before the latest one answers at once.
        self._waits_ended = 0
        self._log = AgentLog(self._loop, self.request)
        self._lost: AgentError | None = AgentError("unavailable", "not connected yet")
        self._shut = False
        # The deadline of a request that names none (a long-poll names its own).
        self.request_timeout = DEFAULT_REQUEST_TIMEOUT
        # The next keepalive: the agent closes a channel whose gateway stops sending them.
        self._keepalive: asyncio.TimerHandle | None = None

    # --- connecting ---------------------------------------------------------------------------

    @classmethod
    async def connect_unix(
        cls,
        path: str | os.PathLike[str],
        *,
        resume: AgentClient | None = None,
        check: PeerCheck | None = None,
        key: str | None = None,
        **cache: int,
    ) -> AgentClient:
        """Connects to the agent daemon's unix socket; `check` vets the listening process at
        every (re)connect, and `key` (the workspace's channel key) proves the gateway to it."""
        return await cls._connect(lambda: open_unix(path, check), resume, cache, key)

    @classmethod
    async def connect_subprocess(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        resume: AgentClient | None = None,
        **cache: int,
    ) -> AgentClient:
        """Starts `argv` (e.g. `mwc-agent connect --socket …`) and speaks over its stdin/stdout."""
        argv = list(argv)
        return await cls._connect(lambda: open_subprocess(argv, env), resume, cache)

    @classmethod
    async def connect_stream(
        cls,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        resume: AgentClient | None = None,
        **cache: int,
    ) -> AgentClient:
        """Speaks over an open stream pair. `reconnect()` then needs a new pair."""
        client = cls._adopt(resume, cache, None)
        await client._start(Transport(reader, writer))
        return client

    @classmethod
    async def connect_transport(
        cls,
        transport: Transport,
        *,
        resume: AgentClient | None = None,
        key: str | None = None,
        **cache: int,
    ) -> AgentClient:
        """Speaks over an open transport (a pushed one, like a Modal exec's); `key` (the
        workspace's channel key) proves the gateway to the agent. `reconnect()` then needs a new
        transport."""
        client = cls._adopt(resume, cache, None, key)
        await client._start(transport)
        return client

    @classmethod
    async def _connect(
        cls,
        connector: Connector,
        resume: AgentClient | None,
        cache: dict[str, int],
        key: str | None = None,
    ) -> AgentClient:
        client = cls._adopt(resume, cache, connector, key)
        await client._start(await connector())
        return client

    @classmethod
    def _adopt(
        cls,
        resume: AgentClient | None,
        cache: dict[str, int],
        connector: Connector | None,
        key: str | None = None,
    ) -> AgentClient:
        """A client on a new channel, or on `resume`'s channel (its cache, whose open streams
        are resubscribed from the last seq held). `cache` sets the bounds of a new channel:
        `stream_bytes`, `max_streams`, `credit`, and `keepalive_seconds` (how often the Hello
        promises a frame; a resumed channel keeps its own)."""
        keepalive = cache.pop("keepalive_seconds", None)
        if resume is None:
            if keepalive is not None:
                cache["keepalive_seconds"] = keepalive
            return cls(AgentChannel(**cache, key=key), connector)
        if cache:
            raise ValueError("a resumed client keeps the cache bounds of the one it resumes")
        resume._abandon("the channel moved to a new client")
        resume._channel.restart()
        return cls(resume._channel, connector)

    async def _start(self, transport: Transport) -> None:
        self._transport = transport
        self._lost = None
        self._hello = self._loop.create_future()
        pushed = transport.attach(
            lambda data: self._pushed(transport, data),
            lambda exc: self._pushed_lost(transport, exc),
        )
        if not pushed:
            self._pump = self._loop.create_task(self._read_loop(transport))
        self._flush()
        try:
            await asyncio.wait_for(asyncio.shield(self._hello), _HELLO_TIMEOUT)
        except TimeoutError:
            self._fail(AgentError("unavailable", "the agent did not say Hello in time"))
            await self._close_transport()
            raise self._lost or AgentError("unavailable", "no Hello") from None
        except AgentError:
            await self._close_transport()
            raise
        self._schedule_keepalive()

    def _schedule_keepalive(self) -> None:
        """Keeps the promise of the channel's Hello: a frame every `keepalive_seconds`, so that
        the agent can tell a gateway that is gone (killed, its container replaced: nothing ends
        its connection) from one with nothing to say, and end the connection (on Modal, the
        `connect` exec that would keep the sandbox running)."""
        if self._keepalive is not None:
            self._keepalive.cancel()
        self._keepalive = self._loop.call_later(
            self._channel.keepalive_seconds, self._send_keepalive
        )

    def _send_keepalive(self) -> None:
        self._keepalive = None
        if self._shut or self._lost is not None:
            return
        if self._channel.keepalive():
            self._flush()
        self._schedule_keepalive()

    async def reconnect(
        self,
        reader: asyncio.StreamReader | None = None,
        writer: asyncio.StreamWriter | None = None,
        *,
        transport: Transport | None = None,
    ) -> None:
        """Opens a new transport (the same way as before, or over the given stream pair or
        transport) and resubscribes every open stream from the last seq the cache holds.
        Requests pending on the old transport fail with `unavailable`."""
        if self._shut:
            raise AgentError("unavailable", "the client was closed")
        if transport is None and (reader is None or writer is None) and self._connector is None:
            raise ValueError(
                "this client was connected to a stream or a transport: pass a new reader and "
                "writer, or a new transport"
            )
        self._fail(AgentError("unavailable", "the client is reconnecting"))
        await self._close_transport()
        if transport is None:
            if reader is not None and writer is not None:
                transport = Transport(reader, writer)
            else:
                assert self._connector is not None
                transport = await self._connector()
        self._channel.restart()
        await self._start(transport)

    async def close(self) -> None:
        """Closes the transport; pending requests and waiting reads fail with `unavailable`."""
        self._shut = True
        if self._keepalive is not None:
            self._keepalive.cancel()
        self._fail(AgentError("unavailable", "the client was closed"))
        await self._close_transport()
        if self._releasing:
            await asyncio.gather(*self._releasing, return_exceptions=True)

    @property
    def closed(self) -> bool:
        """No transport is usable: the client was closed, or the transport was lost."""
        return self._lost is not None

    @property
    def info(self) -> dict[str, Any]:
        """The agent's Hello: `protocol`, `build`, `role`."""
        return dict(self._info)

    @property
    def channel(self) -> AgentChannel:
        """The sans-IO channel underneath (for its cache figures)."""
        return self._channel

    # --- requests -----------------------------------------------------------------------------

    async def request(
        self,
        op: str,
        args: Mapping[str, Any] | None = None,
        payload: bytes = b"",
        timeout: float | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        """Sends one request and returns its result and payload; raises `AgentError` (code
        `timeout` when no answer came within `timeout` seconds, by default
        `request_timeout`)."""
        self._check_usable()
        try:
            request_id = self._channel.request(op, dict(args or {}), payload)
        except ChannelRefusal as e:
            raise AgentError(e.code, str(e)) from None
        future: asyncio.Future[tuple[dict[str, Any], bytes]] = self._loop.create_future()
        self._pending[request_id] = future
        try:
            self._flush()
            if timeout is None:
                timeout = self.request_timeout
            try:
                # A peer that stopped reading stops the drain too: it is within the deadline.
                async with asyncio.timeout(timeout):
                    await self._drain()
                    return await future
            except TimeoutError:
                raise AgentError("timeout", f"{op} got no answer in {timeout:g} s") from None
        finally:
            if self._pending.pop(request_id, None) is not None:
                self._channel.cancel(request_id)

    # --- streams ------------------------------------------------------------------------------

    async def read_events(
        self,
        stream_id: str,
        cursor: int = 0,
        *,
        max_events: int = 100,
        max_bytes: int = 65536,
        wait_seconds: float = 0.0,
    ) -> Page:
        """The events of an exec or watch after `cursor` (docs/architecture.md §5.2), served from
        the cache; subscribes on first use. With `wait_seconds`, waits until an event exists or
        the stream ends. Cursors older than the cache are read from the agent's log, and so is
        an exec whose stream the cache has no room for (every cached stream has a reader)."""
        if wait_seconds < 0:
            raise ValueError("wait_seconds must not be negative")
        deadline = self._loop.time() + wait_seconds
        # Pinned while read, so that readers of more streams than the cache holds do not drop
        # each other's streams in turn; the readers past the bound read the agent's log.
        self._channel.pin(stream_id)
        try:
            return await self._read_events(stream_id, cursor, max_events, max_bytes, deadline)
        finally:
            self._channel.unpin(stream_id)

    def end_waits(self) -> None:
        """Answers every long-poll waiting now with what its stream holds (an empty page, if
        nothing came): a gateway that is stopping must not hold its clients, nor be held by
        them, for the rest of their wait. Reads that start later wait as usual."""
        self._waits_ended += 1
        self._waiters.wake_all()

    async def _read_events(
        self, stream_id: str, cursor: int, max_events: int, max_bytes: int, deadline: float
    ) -> Page:
        ended = self._waits_ended
        while True:
            kind, page = self._channel.read_cached(stream_id, cursor, max_events, max_bytes)
            # Reading at `cursor` consumed what came before it: credit it frees goes out now.
            self._flush()
            if kind == "missing":
                if await self._subscribe(stream_id, cursor):
                    continue
                page = await self._log.poll(stream_id, cursor, max_events, max_bytes, deadline)
                if len(page) > 0 or page.closed or self._loop.time() >= deadline:
                    return page
                continue
            if kind == "expired" and page is not None:
                return await self._log.read(stream_id, cursor, max_events, max_bytes, page)
            if kind == "ahead_closed":
                return await self._log.read(stream_id, cursor, max_events, max_bytes, None)
            if page is not None and (len(page) > 0 or page.closed):
                return page
            remaining = deadline - self._loop.time() if self._waits_ended == ended else 0.0
            if remaining <= 0:
                if page is not None:
                    return page
                return await self._log.read(stream_id, cursor, max_events, max_bytes, None)
            self._check_usable()
            await self._waiters.wait(stream_id, remaining)

    async def _subscribe(self, stream_id: str, cursor: int) -> bool:
        """Caches the stream (or waits for its subscription in flight). False when the cache
        has no room: every cached stream has a reader."""
        future = self._subscribing.get(stream_id)
        if future is None:
            self._check_usable()
            try:
                request_id, dropped = self._channel.subscribe(stream_id, cursor)
            except ChannelRefusal as e:
                if e.code == "limit":
                    return False
                raise AgentError(e.code, str(e)) from None
            for name in dropped:
                self._waiters.wake(name)
            if request_id is None:
                return True
            future = self._loop.create_future()
            future.add_done_callback(_retrieve)
            self._pending[request_id] = future
            self._subscribing[stream_id] = future
            self._flush()
        try:
            await asyncio.shield(future)
        finally:
            if future.done() and self._subscribing.get(stream_id) is future:
                del self._subscribing[stream_id]
        return True

    # --- reading ------------------------------------------------------------------------------

    async def _read_loop(self, transport: Transport) -> None:
        """Reads a pulled transport (see `transports`) until it ends."""
        reader = transport.reader
        try:
            if reader is None:
                raise AgentError("internal", "a transport with neither a reader nor pushes")
            while True:
                data = await reader.read(_READ_BYTES)
                if not data:
                    raise AgentError("unavailable", "the agent closed the channel")
                self._received(data)
        except asyncio.CancelledError:
            raise
        except AgentError as e:
            self._fail(e)
        except (OSError, ConnectionError) as e:
            self._fail(AgentError("unavailable", f"the agent channel was lost: {e}"))
        # The transport is useless now; release it (a subprocess is ended) without waiting for
        # `reconnect` or `close`.
        if self._transport is transport:
            self._transport = None
        await transport.close()

    def _pushed(self, transport: Transport, data: memoryview) -> None:
        """What a pushed transport read (see `transports`); a transport this client has left
        behind is ignored."""
        if self._transport is not transport or self._lost is not None:
            return
        try:
            self._received(data)
        except AgentError as e:
            self._fail(e)
            self._release(transport)

    def _pushed_lost(self, transport: Transport, exc: Exception | None) -> None:
        if self._transport is not transport:
            return
        if exc is None:
            self._fail(AgentError("unavailable", "the agent closed the channel"))
        else:
            self._fail(AgentError("unavailable", f"the agent channel was lost: {exc}"))
        self._release(transport)

    def _release(self, transport: Transport) -> None:
        """Closes a transport that ended or broke the protocol (a subprocess is ended), as the
        read loop does, without waiting for `reconnect` or `close`; `close` waits for it."""
        if self._transport is transport:
            self._transport = None
        task = self._loop.create_task(transport.close())
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    def _received(self, data: bytes | memoryview) -> None:
        """Feeds what the transport read to the channel and hands out what it produced."""
        info, responses, woken = self._channel.feed(data)
        if info is not None:
            self._info = json.loads(info)
            if self._hello is not None and not self._hello.done():
                self._hello.set_result(None)
        for request_id, ok, body, response_payload in responses:
            self._resolve(request_id, ok, body, response_payload)
        for stream_id in woken:
            self._waiters.wake(stream_id)
        self._flush()

    def _resolve(self, request_id: int, ok: bool, body: str, payload: bytes) -> None:
        if request_id == 0:
            raise AgentError.from_body(body)
        future = self._pending.pop(request_id, None)
        if future is None or future.done():
            return
        if ok:
            future.set_result((json.loads(body), payload))
        else:
            future.set_exception(AgentError.from_body(body))

    # --- plumbing -----------------------------------------------------------------------------

    def _flush(self) -> None:
        data = self._channel.take_outgoing()
        if data and self._transport is not None and self._lost is None:
            self._transport.writer.write(data)

    async def _drain(self) -> None:
        transport = self._transport
        if transport is None or self._lost is not None:
            return
        try:
            await transport.writer.drain()
        except (OSError, ConnectionError) as e:
            self._fail(AgentError("unavailable", f"the agent channel was lost: {e}"))

    def _check_usable(self) -> None:
        if self._lost is not None:
            raise AgentError(self._lost.code, self._lost.message)

    def _fail(self, error: AgentError) -> None:
        """Marks the transport unusable: pending requests fail with `error` (a new instance
        each), and every waiting read wakes to see it."""
        if self._lost is None:
            self._lost = error
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(AgentError(error.code, error.message))
        self._subscribing.clear()
        if self._hello is not None and not self._hello.done():
            self._hello.set_exception(AgentError(error.code, error.message))
            self._hello.add_done_callback(_retrieve)
        self._waiters.wake_all()

    def _abandon(self, reason: str) -> None:
        """Gives up this client's transport without awaiting (its channel moves on)."""
        self._shut = True
        self._fail(AgentError("unavailable", reason))
        if self._pump is not None:
            self._pump.cancel()
        if self._transport is not None:
            self._transport.writer.close()

    async def _close_transport(self) -> None:
        pump, self._pump = self._pump, None
        if pump is not None and pump is not asyncio.current_task():
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.close()


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Marks a shared future's exception as seen, so a future nobody awaited logs nothing."""
    if not future.cancelled():
        future.exception()
