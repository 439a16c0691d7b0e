"""The gateway's agent client against a real agent daemon started in a temporary directory:
requests, streamed execs, long-polls woken by notification, reconnects and the cache bounds; and
the pushed subprocess transport it speaks through `mwc-agent connect` over."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from modal_workspace_core._core import AgentChannel, ChannelRefusal, EventRing, Page, parse_page
from modal_workspace_core.channel.client import AgentClient, AgentError
from modal_workspace_core.channel.transports import open_subprocess, open_unix

# Generous bounds: the machine is small and shared.
STARTUP_SECONDS = 30.0
# Generous: the suite runs on two workers, and a loaded machine is slow to schedule a process.
SOON = 15.0


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Path]:
    """A daemon on a workspace in `tmp_path`; yields its socket."""
    with run_daemon(tmp_path) as sock:
        yield sock


@contextlib.contextmanager
def run_daemon(tmp_path: Path, *options: str) -> Iterator[Path]:
    """Runs a daemon (with extra command-line `options`) on a workspace in `tmp_path`."""
    root, state, sock = tmp_path / "root", tmp_path / "state", tmp_path / "agent.sock"
    root.mkdir()
    argv = [sys.executable, "-m", "modal_workspace_core.agent", "daemon", *options]
    argv += ["--root", str(root), "--state-dir", str(state), "--socket", str(sock)]
    process = subprocess.Popen(argv, env={**os.environ, "MWC_AGENT_LOG": "warn"})
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not sock.exists():
            assert process.poll() is None, "the daemon exited at start"
            assert time.monotonic() < deadline, "the daemon did not open its socket"
            time.sleep(0.02)
        yield sock
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
async def client(daemon: Path) -> AsyncIterator[AgentClient]:
    client = await AgentClient.connect_unix(daemon)
    yield client
    await client.close()


def connect_argv(sock: Path) -> list[str]:
    return [sys.executable, "-m", "modal_workspace_core.agent", "connect", "--socket", str(sock)]


async def start(client: AgentClient, command: str, **args: Any) -> str:
    status, _ = await client.request("exec.start", {"command": command, **args})
    exec_id: str = status["exec_id"]
    return exec_id


async def read_to_done(
    client: AgentClient, exec_id: str, cursor: int = 0, **kwargs: Any
) -> tuple[list[dict[str, Any]], int]:
    """Every event after `cursor` until the stream ends, checking that seqs rise by one and
    that the exit event came."""
    events: list[dict[str, Any]] = []
    while True:
        page = await client.read_events(exec_id, cursor, wait_seconds=20, **kwargs)
        assert not page.cursor_expired
        for event in page.events:
            assert event["seq"] == cursor + 1, "an event was lost or repeated"
            cursor = event["seq"]
            events.append(event)
        if page.closed and not page.has_more:
            assert any(e["type"] == "exit" for e in events)
            return events, cursor


def text(events: list[dict[str, Any]], kind: str) -> str:
    return "".join(e.get("data", "") for e in events if e["type"] == kind)


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# --- requests -------------------------------------------------------------------------------


async def test_requests_get_their_answers_and_errors_carry_the_protocol_code(
    client: AgentClient,
) -> None:
    assert client.info["role"] == "agent"
    assert client.info["protocol"] == 1
    pings = await asyncio.gather(*(client.request("ping") for _ in range(20)))
    assert all(result["protocol"] == 1 for result, _ in pings)
    with pytest.raises(AgentError) as err:
        await client.request("exec.status", {"exec_id": "ex-" + "0" * 32})
    assert err.value.code == "not_found"
    assert isinstance(err.value, RuntimeError)
    with pytest.raises(AgentError) as err:
        await client.request("Not An Op")
    assert err.value.code == "invalid_argument"


async def test_a_gateway_refuses_an_agent_of_another_protocol(tmp_path: Path) -> None:
    async def old_agent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        header = json.dumps({"protocol": 99, "build": "9.9.9", "role": "agent"}).encode()
        body = struct.pack(">I", len(header)) + header
        writer.write(struct.pack(">IB", len(body), 1) + body)
        await writer.drain()
        await reader.read()

    server = await asyncio.start_unix_server(old_agent, str(tmp_path / "old.sock"))
    async with server:
        with pytest.raises(AgentError) as err:
            await AgentClient.connect_unix(tmp_path / "old.sock")
    assert err.value.code == "protocol_mismatch"
    for part in ("protocol 1", "protocol 99", "9.9.9"):
        assert part in err.value.message


def frame(kind: int, header: dict[str, Any], payload: bytes = b"") -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    body = struct.pack(">I", len(head)) + head + payload
    return struct.pack(">IB", len(body), kind) + body


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, dict[str, Any]]:
    length, kind = struct.unpack(">IB", await reader.readexactly(5))
    body = await reader.readexactly(length)
    (head_len,) = struct.unpack(">I", body[:4])
    return kind, json.loads(body[4 : 4 + head_len])


async def test_a_unix_client_takes_pages_however_the_socket_cuts_them(tmp_path: Path) -> None:
    # The unix transport reads into one reused buffer: frames that arrive many to a read, or
    # cut into pieces across reads, must come out whole, and the end of the socket must fail
    # the reads that wait on it.
    exec_id = "ex-" + "1" * 32
    ring = EventRing(1 << 30)
    for i in range(200):
        ring.append("stdout", f"line {i:04} {'z' * (i % 97)}\n".encode())
    pages, cursor = [], 0
    while True:
        page = ring.read(cursor, 10, 4096)
        pages.append(frame(4, {"stream": exec_id}, page.to_json().encode()))
        cursor = page.next_cursor
        if not page.has_more:
            break
    closed = asyncio.Event()

    async def agent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(frame(1, {"protocol": 1, "build": "0.1.0", "role": "agent"}))
        await read_frame(reader)  # the gateway's Hello
        kind, request = await read_frame(reader)
        assert (kind, request["op"]) == (2, "subscribe")
        wire = frame(3, {"id": request["id"], "ok": True, "result": {}}) + b"".join(pages)
        half = len(wire) // 2
        writer.write(wire[:half])
        await writer.drain()
        for at in range(half, len(wire), 7):
            writer.write(wire[at : at + 7])
            await writer.drain()
            if at % 700 == 0:
                await asyncio.sleep(0)
        await closed.wait()
        writer.close()

    server = await asyncio.start_unix_server(agent, str(tmp_path / "fake.sock"))
    async with server:
        client = await AgentClient.connect_unix(tmp_path / "fake.sock", credit=1 << 20)
        try:
            seen, cursor = [], 0
            while cursor < 200:
                page = await client.read_events(exec_id, cursor, max_events=1000, wait_seconds=5)
                assert not page.cursor_expired
                for event in page.events:
                    assert event["seq"] == cursor + 1
                    cursor = event["seq"]
                    seen.append(event["data"])
            assert seen == [f"line {i:04} {'z' * (i % 97)}\n" for i in range(200)]
            waiting = asyncio.create_task(client.read_events(exec_id, cursor, wait_seconds=20))
            await asyncio.sleep(0.1)
            closed.set()
            with pytest.raises(AgentError) as err:
                await asyncio.wait_for(waiting, SOON)
            assert err.value.code == "unavailable"
            assert client.closed
        finally:
            await client.close()


def test_a_channel_copies_what_it_is_fed_from_a_reused_buffer() -> None:
    channel = AgentChannel()
    hello = frame(1, {"protocol": 1, "build": "0.1.0", "role": "agent"})
    buffer = bytearray(len(hello))
    view = memoryview(buffer)
    cut = len(hello) // 2
    buffer[:cut] = hello[:cut]
    assert channel.feed(view[:cut]) == (None, [], [])
    # The transport reads the rest into the same buffer: the first half must have been kept.
    buffer[: len(hello) - cut] = hello[cut:]
    info, responses, _ = channel.feed(view[: len(hello) - cut])
    assert info is not None and json.loads(info)["role"] == "agent"
    assert responses == []
    assert channel.feed(b"") == (None, [], [])


# --- streams --------------------------------------------------------------------------------


async def test_a_realtime_exec_streams_to_done_with_nothing_missing(client: AgentClient) -> None:
    exec_id = await start(
        client, "for i in $(seq 1 3000); do echo out $i; echo err $i >&2; done; exit 3"
    )
    events, cursor = await read_to_done(client, exec_id)
    assert text(events, "stdout") == "".join(f"out {i}\n" for i in range(1, 3001))
    assert text(events, "stderr") == "".join(f"err {i}\n" for i in range(1, 3001))
    (exit_event,) = [e for e in events if e["type"] == "exit"]
    assert exit_event["returncode"] == 3
    # The stream has ended: a read at its end returns at once, empty and closed.
    before = time.monotonic()
    end = await client.read_events(exec_id, cursor, wait_seconds=20)
    assert end.closed and len(end) == 0
    assert time.monotonic() - before < SOON


async def test_twenty_long_polls_of_one_exec_are_woken_together(client: AgentClient) -> None:
    exec_id = await start(client, "read line; echo got $line")
    # The exec announces it runs, then waits for its stdin.
    first = await client.read_events(exec_id, 0, wait_seconds=20)
    assert [e["type"] for e in first.events] == ["status"]
    cursor = first.next_cursor
    polls = [
        asyncio.create_task(client.read_events(exec_id, cursor, wait_seconds=25)) for _ in range(20)
    ]
    await asyncio.sleep(0.3)
    assert not any(p.done() for p in polls), "a long-poll returned with nothing to say"
    before = time.monotonic()
    await client.request("exec.input", {"exec_id": exec_id}, b"hello\n")
    pages: list[Page] = await asyncio.wait_for(asyncio.gather(*polls), SOON)
    assert time.monotonic() - before < SOON
    for page in pages:
        assert page.events, "a woken poll returned nothing"
        assert page.events[0]["seq"] == cursor + 1
    assert {p.events[0]["seq"] for p in pages} == {cursor + 1}
    events, _ = await read_to_done(client, exec_id, cursor)
    assert "got hello\n" in text(events, "stdout")


async def test_a_long_poll_returns_soon_after_output_and_at_its_timeout_otherwise(
    client: AgentClient,
) -> None:
    exec_id = await start(client, "sleep 1; echo late; exec sleep 1000")
    cursor = (await client.read_events(exec_id, 0)).next_cursor
    before = time.monotonic()
    page = await client.read_events(exec_id, cursor, wait_seconds=20)
    while not any(e["type"] == "stdout" for e in page.events):
        cursor = page.next_cursor
        page = await client.read_events(exec_id, cursor, wait_seconds=20)
    assert time.monotonic() - before < 1 + SOON
    assert text(page.events, "stdout") == "late\n"

    before = time.monotonic()
    quiet = await client.read_events(exec_id, page.next_cursor, wait_seconds=0.5)
    waited = time.monotonic() - before
    assert len(quiet) == 0 and not quiet.closed
    assert 0.5 <= waited < 0.5 + SOON
    assert len(client._waiters) == 0, "a timed-out long-poll left its waiter behind"
    await client.request("exec.cancel", {"exec_id": exec_id, "grace_seconds": 0})


async def test_ending_the_waits_answers_the_open_long_polls_and_not_the_later_ones(
    client: AgentClient,
) -> None:
    exec_id = await start(client, "exec sleep 1000")
    cursor = (await client.read_events(exec_id, 0, wait_seconds=20)).next_cursor
    polls = [
        asyncio.create_task(client.read_events(exec_id, cursor, wait_seconds=25)) for _ in range(3)
    ]
    await asyncio.sleep(0.3)
    assert not any(p.done() for p in polls)
    client.end_waits()
    pages: list[Page] = await asyncio.wait_for(asyncio.gather(*polls), SOON)
    assert all(len(p) == 0 and p.next_cursor == cursor and not p.closed for p in pages)
    # A stop ends the waits of the moment; a read begun after it waits as it asked.
    before = time.monotonic()
    await client.read_events(exec_id, cursor, wait_seconds=0.5)
    assert time.monotonic() - before >= 0.5
    await client.request("exec.cancel", {"exec_id": exec_id, "grace_seconds": 0})


async def test_a_hundred_long_polls_on_a_hundred_execs_all_read_to_done(
    client: AgentClient,
) -> None:
    # More streams than the cache holds (64 by default), all read at once: the readers past the
    # bound are served from the agent's log, and none evicts another's stream.
    assert client.channel.max_streams == 64
    execs = await asyncio.gather(
        *(start(client, "read line; for i in 1 2 3; do echo $line $i; done") for _ in range(100))
    )
    readers = [asyncio.create_task(read_to_done(client, exec_id)) for exec_id in execs]
    await asyncio.sleep(1.0)
    assert not any(r.done() for r in readers), "a reader ended before its exec"
    assert client.channel.cache_streams <= 64

    # A quiet exec's long-poll still returns at its timeout while the cache is full of readers.
    quiet = await start(client, "exec sleep 1000")
    first = await client.read_events(quiet, 0, wait_seconds=20)
    before = time.monotonic()
    page = await client.read_events(quiet, first.next_cursor, wait_seconds=1.0)
    waited = time.monotonic() - before
    assert len(page) == 0 and not page.closed
    assert 1.0 <= waited < 1.0 + SOON

    for n, exec_id in enumerate(execs):
        await client.request("exec.input", {"exec_id": exec_id}, f"x{n}\n".encode())
    done = await asyncio.wait_for(asyncio.gather(*readers), 60)
    for n, (events, _) in enumerate(done):
        assert text(events, "stdout") == "".join(f"x{n} {i}\n" for i in (1, 2, 3))
    assert client.channel.cache_streams <= 64
    await client.request("exec.cancel", {"exec_id": quiet, "grace_seconds": 0})


async def test_connect_subprocess_speaks_through_mwc_agent_connect(daemon: Path) -> None:
    client = await AgentClient.connect_subprocess(connect_argv(daemon))
    try:
        assert client.info["role"] == "agent"
        exec_id = await start(client, "echo through connect")
        events, _ = await read_to_done(client, exec_id)
        assert text(events, "stdout") == "through connect\n"
    finally:
        await client.close()
    assert client.closed
    with pytest.raises(AgentError) as err:
        await client.request("ping")
    assert err.value.code == "unavailable"


async def test_a_client_over_connect_streams_a_large_output_whole_and_in_order(
    daemon: Path,
) -> None:
    # Several MiB through the pushed stdout of `connect`: cut wherever the pipe cuts it.
    client = await AgentClient.connect_subprocess(connect_argv(daemon))
    try:
        exec_id = await start(client, "seq 1 1000000")
        events, _ = await read_to_done(client, exec_id, max_bytes=1 << 20, max_events=10_000)
        assert text(events, "stdout") == "".join(f"{i}\n" for i in range(1, 1_000_001))
    finally:
        await client.close()


async def test_a_subprocess_transport_pushes_what_came_before_attach_first(
    tmp_path: Path,
) -> None:
    written = tmp_path / "written"
    script = (
        "import sys; out = sys.stdout.buffer; out.write(b'early;'); out.flush();"
        f" open({str(written)!r}, 'w').close(); out.write(sys.stdin.buffer.readline())"
    )
    transport = await open_subprocess([sys.executable, "-c", script])
    try:
        while not written.exists():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # the loop reads the pipe: the early bytes wait for a consumer
        received: list[tuple[bool, bytes]] = []
        ends: list[tuple[Exception | None, int]] = []
        attaching = True
        assert transport.attach(
            lambda view: received.append((attaching, bytes(view))),
            lambda exc: ends.append((exc, len(received))),
        )
        attaching = False
        assert received == [(True, b"early;")]
        transport.writer.write(b"late\n")
        await transport.writer.drain()
        transport.writer.close()  # the child's readline returns; it writes and exits
        deadline = time.monotonic() + SOON
        while not ends:
            assert time.monotonic() < deadline, "the end of the output was not reported"
            await asyncio.sleep(0.01)
        assert b"".join(data for _, data in received) == b"early;late\n"
        assert not any(during for during, _ in received[1:])
        # Reported once, after the last read.
        await asyncio.sleep(0.1)
        assert ends == [(None, len(received))]
    finally:
        await transport.close()
    assert transport.process.get_returncode() == 0


async def test_a_subprocess_transport_drains_only_as_fast_as_the_child_reads(
    tmp_path: Path,
) -> None:
    go = tmp_path / "go"
    script = (
        f"import os, sys, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "print(len(sys.stdin.buffer.read()), flush=True)"
    )
    transport = await open_subprocess([sys.executable, "-c", script])
    try:
        received = bytearray()
        ended = asyncio.Event()
        transport.attach(received.extend, lambda exc: ended.set())
        payload = b"x" * (4 << 20)
        transport.writer.write(payload)
        draining = asyncio.create_task(transport.writer.drain())
        await asyncio.sleep(0.3)
        assert not draining.done(), "drain returned while the pipe was full"
        go.touch()
        await asyncio.wait_for(draining, SOON)
        transport.writer.close()
        await asyncio.wait_for(ended.wait(), SOON)
        assert received == f"{len(payload)}\n".encode()
    finally:
        await transport.close()


async def test_closing_a_subprocess_transport_kills_a_child_that_ignores_stdin_eof() -> None:
    transport = await open_subprocess([sys.executable, "-c", "import time; time.sleep(60)"])
    before = time.monotonic()
    await transport.close()
    assert time.monotonic() - before < SOON
    assert transport.process.get_returncode() == -signal.SIGKILL


async def test_a_client_over_a_stream_pair_reads_it_and_reconnects_over_a_new_pair(
    daemon: Path,
) -> None:
    # The one pulled transport: any asyncio stream pair (here a plain unix connection).
    client = await AgentClient.connect_stream(*await asyncio.open_unix_connection(str(daemon)))
    try:
        exec_id = await start(client, "seq 1 200000")
        events, _ = await read_to_done(client, exec_id, max_bytes=1 << 20, max_events=10_000)
        assert text(events, "stdout") == "".join(f"{i}\n" for i in range(1, 200_001))
        with pytest.raises(ValueError):
            await client.reconnect()
        await client.reconnect(*await asyncio.open_unix_connection(str(daemon)))
        assert (await client.request("ping"))[0]["protocol"] == 1
    finally:
        await client.close()


async def test_a_client_on_a_given_transport_reconnects_only_over_a_new_one(
    daemon: Path,
) -> None:
    client = await AgentClient.connect_transport(await open_unix(daemon))
    try:
        with pytest.raises(ValueError):
            await client.reconnect()
        # Refused before the transport it has was touched.
        assert (await client.request("ping"))[0]["protocol"] == 1
        await client.reconnect(transport=await open_subprocess(connect_argv(daemon)))
        assert (await client.request("ping"))[0]["protocol"] == 1
    finally:
        await client.close()


class StreamReader:
    """Reads one exec's events across reconnects, checking that none is lost or repeated."""

    def __init__(self, exec_id: str) -> None:
        self.exec_id = exec_id
        self.cursor = 0
        self.seen: list[dict[str, Any]] = []
        self.done = False

    async def read(self, client: AgentClient, past: int | None = None) -> None:
        """Reads until the exit event, or until the cursor is beyond `past`."""
        while not self.done and (past is None or self.cursor <= past):
            page = await client.read_events(self.exec_id, self.cursor, wait_seconds=20)
            assert not page.cursor_expired
            for event in page.events:
                assert event["seq"] == self.cursor + 1, "an event was lost or repeated"
                self.cursor = event["seq"]
                self.seen.append(event)
            self.done = page.closed and not page.has_more

    async def read_until_lost(self, client: AgentClient) -> None:
        """Reads what the cache still has after the transport died, until reads fail."""
        # A stream already read to its end has nothing left to lose: the kill proved nothing.
        assert not self.done, "the exec ended before its transport was killed"
        with pytest.raises(AgentError) as err:
            await asyncio.wait_for(self.read(client), 4 * SOON)
        assert err.value.code == "unavailable"
        assert not self.done


def kill_transport(client: AgentClient) -> None:
    transport = client._transport
    assert transport is not None
    transport.process.send_signal(signal.SIGKILL)  # type: ignore[attr-defined]


async def test_killing_the_transport_mid_stream_and_resuming_loses_and_repeats_nothing(
    daemon: Path,
) -> None:
    client = await AgentClient.connect_subprocess(connect_argv(daemon))
    # Numbered lines flow until the test says stop, so every kill lands mid-stream.
    stop = daemon.parent / "stop"
    script = f"i=0; while [ ! -e {stop} ]; do i=$((i+1)); echo $i; sleep 0.002; done; echo end"
    reader = StreamReader(await start(client, script))
    try:
        await reader.read(client, past=100)
        kill_transport(client)
        await reader.read_until_lost(client)
        assert client.closed
        # The same client on a new transport resubscribes from what its cache holds.
        await client.reconnect()
        await reader.read(client, past=reader.cursor + 200)
        kill_transport(client)
        await reader.read_until_lost(client)
        # So does a new client that takes over the old one's cache.
        client = await AgentClient.connect_subprocess(connect_argv(daemon), resume=client)
        await reader.read(client, past=reader.cursor + 100)
        stop.touch()
        await reader.read(client)
    finally:
        await client.close()
    lines = text(reader.seen, "stdout").splitlines()
    assert lines[-1] == "end"
    assert lines[:-1] == [str(i) for i in range(1, len(lines))]
    assert len(lines) > 300


async def test_a_cursor_older_than_the_cache_is_read_from_the_agents_log(daemon: Path) -> None:
    client = await AgentClient.connect_unix(daemon, stream_bytes=64 * 1024)
    try:
        exec_id = await start(client, "seq 1 100000")
        events, _ = await read_to_done(client, exec_id, max_bytes=1 << 20, max_events=10_000)
        assert text(events, "stdout") == "".join(f"{i}\n" for i in range(1, 100_001))
        assert client.channel.cache_bytes <= 64 * 1024
        kind, _ = client.channel.read_cached(exec_id, 0)
        assert kind == "expired"
        page = await client.read_events(exec_id, 0, max_events=3)
        assert not page.cursor_expired
        assert [e["seq"] for e in page.events] == [1, 2, 3]
        assert [e["type"] for e in page.events] == ["status", "stdout", "stdout"]
        assert page.events[1]["data"].startswith("1\n2\n3\n")
    finally:
        await client.close()


async def test_a_flood_does_not_grow_the_gateway_beyond_the_cache_bounds(daemon: Path) -> None:
    stream_bytes = 1 << 20
    client = await AgentClient.connect_unix(daemon, stream_bytes=stream_bytes)
    try:
        exec_id = await start(client, "head -c 100000000 /dev/zero | base64 -w 0; echo")
        # Only the first page is read by a client: the cache takes the rest in as it streams.
        await client.read_events(exec_id, 0, wait_seconds=20)
        baseline = rss_bytes()
        peak_cache = 0
        while True:
            peak_cache = max(peak_cache, client.channel.cache_bytes)
            status, _ = await client.request("exec.status", {"exec_id": exec_id})
            if status["state"] != "running":
                kind, page = client.channel.read_cached(exec_id, status["last_seq"])
                if kind == "page" and page is not None and page.closed:
                    break
            await asyncio.sleep(0.05)
        growth = rss_bytes() - baseline
        assert peak_cache <= stream_bytes
        assert growth < 48 << 20, f"the gateway grew by {growth >> 20} MiB"
    finally:
        await client.close()


async def test_a_slow_reader_of_a_flood_is_served_from_the_cache_and_loses_nothing(
    tmp_path: Path,
) -> None:
    # Credit comes back as the reader consumes pages, so the agent pushes no further than a
    # window ahead of it: the rest waits in the agent's log (large enough here) and reaches the
    # reader through the 1 MiB cache, never through a read of the log.
    flood = 64 << 20
    with run_daemon(tmp_path, "--max-log-bytes", str(256 << 20)) as sock:
        client = await AgentClient.connect_unix(sock, stream_bytes=1 << 20, credit=1 << 20)
        log_reads = 0
        request = client.request

        async def counting(op: str, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], bytes]:
            nonlocal log_reads
            log_reads += op == "exec.read"
            return await request(op, *args, **kwargs)

        client.request = counting  # type: ignore[method-assign]
        try:
            line = "0123456789abcdef" * 4 + "\n"
            exec_id = await start(client, f"yes {line[:-1]} | head -c {flood}")
            first = await client.read_events(exec_id, 0, wait_seconds=20)
            # The reader falls behind by the whole flood: it reads on only once the exec ended.
            while (await client.request("exec.status", {"exec_id": exec_id}))[0]["state"] == (
                "running"
            ):
                assert client.channel.cache_bytes <= 1 << 20
                await asyncio.sleep(0.1)
            received = sum(len(e.get("data", "")) for e in first.events if e["type"] == "stdout")
            cursor = first.next_cursor
            while True:
                page = await client.read_events(exec_id, cursor, max_bytes=1 << 20, wait_seconds=20)
                assert not page.cursor_expired and page.dropped_events == 0
                for event in page.events:
                    assert event["seq"] == cursor + 1
                    cursor = event["seq"]
                    if event["type"] == "stdout":
                        received += len(event["data"])
                if page.closed and not page.has_more:
                    break
            assert received == flood
            assert log_reads == 0, "a slow reader was sent to the agent's log"
        finally:
            await client.close()


def test_a_channel_promises_the_default_keepalive_unless_told() -> None:
    from modal_workspace_core._core import CHANNEL_KEEPALIVE_SECONDS, AgentChannel

    assert AgentChannel().keepalive_seconds == CHANNEL_KEEPALIVE_SECONDS
    assert AgentChannel(keepalive_seconds=3).keepalive_seconds == 3


def test_the_channels_refusals_are_classes_of_their_own_with_the_protocols_code() -> None:
    channel = AgentChannel()
    with pytest.raises(ChannelRefusal) as refused:
        channel.request("No Such Op!", {})
    assert refused.value.code == "invalid_argument"
    assert isinstance(refused.value, ValueError)  # as it was before it had a class
    with pytest.raises(ChannelRefusal) as bad_page:
        parse_page(b"not a page")
    assert bad_page.value.code == "internal"
