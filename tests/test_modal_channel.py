"""The agent channel on the Modal driver with the real agent daemon as the sandbox's entrypoint:
once the channel is open, execs, polls, input and cancel cost no new Modal exec; a dropped channel
or a new gateway process resumes every stream from its cursor with nothing lost. And, against a
fake exec, how the channel pushes the exec's output to its consumer."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_workspace_core.channel.client import AgentClient
from modal_workspace_core.drivers.base import WorkspaceSpec
from modal_workspace_core.drivers.modal.channel import ExecChannel
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings
from modal_workspace_core.errors import NotFoundError
from modal_workspace_core.policy import new_id

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

APP = "channel-tests"
IMAGE = "channel-test-image"
# Lines printed slowly enough that a reader joins while the exec still runs.
COUNTING = "for i in $(seq 1 40); do echo line-$i; sleep 0.05; done"


@pytest.fixture
async def driver(modal_control_plane: ControlPlane) -> AsyncIterator[ModalDriver]:
    modal_control_plane.publish_image(IMAGE, "im-channeltestimage0000")
    driver = ModalDriver(ModalSettings(app_name=APP, default_image_name=IMAGE))
    yield driver
    await driver.close()


async def _workspace(driver: ModalDriver) -> str:
    workspace_id = new_id("ws")
    await driver.create(workspace_id, WorkspaceSpec())
    return workspace_id


def _stdout(events: list[dict[str, Any]]) -> str:
    return "".join(e.get("data", "") for e in events if e.get("type") == "stdout")


async def _read_until_done(
    client: AgentClient, exec_id: str, cursor: int
) -> tuple[list[dict[str, Any]], int]:
    events: list[dict[str, Any]] = []
    while True:
        page = json.loads((await client.read_events(exec_id, cursor, wait_seconds=10)).to_json())
        assert not page["cursor_expired"]
        events.extend(page["events"])
        cursor = page["next_cursor"]
        if page["closed"] and not page["has_more"]:
            return events, cursor


async def test_starting_polling_input_and_cancel_cost_no_new_exec_calls(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    workspace_id = await _workspace(driver)
    client = await driver.connect(workspace_id)
    assert (await client.request("ping"))[0]["root"]
    before = modal_control_plane.calls()

    started, _ = await client.request("exec.start", {"argv": ["cat"]})
    exec_id = started["exec_id"]
    cursor = 0
    for _ in range(100):
        page = await client.read_events(exec_id, cursor)
        cursor = page.next_cursor
    await client.request("exec.input", {"exec_id": exec_id}, b"echoed through cat\n")
    seen: list[dict[str, Any]] = []
    while "echoed through cat" not in _stdout(seen):
        page = await client.read_events(exec_id, cursor, wait_seconds=10)
        seen.extend(page.events)
        cursor = page.next_cursor
    cancelled, _ = await client.request("exec.cancel", {"exec_id": exec_id})

    after = modal_control_plane.calls()
    new_calls = {name for name in after if after[name] != before[name]}
    # Bytes to the agent are the only traffic: no exec, no lookup, no sandbox call.
    assert new_calls <= {"TaskExecStdinWrite"}
    assert cancelled["exec_id"] == exec_id


async def test_a_dropped_channel_reopens_and_resumes_every_stream_from_its_cursor(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    workspace_id = await _workspace(driver)
    client = await driver.connect(workspace_id)
    started, _ = await client.request("exec.start", {"command": COUNTING})
    exec_id = started["exec_id"]
    first = await client.read_events(exec_id, 0, wait_seconds=10)
    assert first.events

    # The gateway loses the exec under the channel (as when Modal drops it).
    for channel in list(driver._channels):
        await channel.close()
    assert client.closed
    before = modal_control_plane.calls()
    resumed = await driver.connect(workspace_id)
    rest, _ = await _read_until_done(resumed, exec_id, first.next_cursor)

    seqs = [e["seq"] for e in first.events + rest]
    assert seqs == list(range(1, seqs[-1] + 1))
    lines = _stdout(first.events + rest).split()
    assert lines == [f"line-{i}" for i in range(1, 41)]
    assert modal_control_plane.calls()["TaskExecStart"] - before["TaskExecStart"] == 1


async def test_an_idle_channel_closes_and_the_next_connect_works(
    modal_control_plane: ControlPlane,
) -> None:
    modal_control_plane.publish_image(IMAGE, "im-channeltestimage0000")
    driver = ModalDriver(
        ModalSettings(app_name=APP, default_image_name=IMAGE, channel_idle_seconds=2)
    )
    workspace_id = await _workspace(driver)
    client = await driver.connect(workspace_id)
    await client.request("ping")

    for _ in range(600):
        if client.closed:
            break
        await asyncio.sleep(0.05)
    assert client.closed

    again = await driver.connect(workspace_id)
    assert (await again.request("ping"))[0]["root"]
    await driver.close()


async def test_a_terminated_workspace_cannot_be_connected(driver: ModalDriver) -> None:
    workspace_id = await _workspace(driver)
    await driver.destroy(workspace_id)

    with pytest.raises(NotFoundError):
        await driver.connect(workspace_id)


RESUME_IN_NEW_PROCESS = """
import asyncio, json, sys
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings

async def main(workspace_id, exec_id, cursor):
    driver = ModalDriver(ModalSettings(app_name=sys.argv[4], default_image_name=sys.argv[5]))
    client = await driver.connect(workspace_id)
    events = []
    while True:
        page = json.loads((await client.read_events(exec_id, cursor, wait_seconds=10)).to_json())
        events.extend(page["events"])
        cursor = page["next_cursor"]
        if page["closed"] and not page["has_more"]:
            break
    await driver.close()
    print(json.dumps(events))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_a_new_gateway_process_finds_the_workspace_and_resumes_a_running_exec(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    workspace_id = await _workspace(driver)
    client = await driver.connect(workspace_id)
    started, _ = await client.request("exec.start", {"command": COUNTING})
    exec_id = started["exec_id"]
    first = await client.read_events(exec_id, 0, wait_seconds=10)
    # This gateway goes away mid-exec.
    await driver.close()

    env = {**os.environ, **modal_control_plane.sdk_env()}
    where = [workspace_id, exec_id, str(first.next_cursor), APP, IMAGE]
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", RESUME_IN_NEW_PROCESS, *where],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stderr
    rest = json.loads(result.stdout.strip().splitlines()[-1])
    lines = _stdout(first.events + rest).split()
    assert lines == [f"line-{i}" for i in range(1, 41)]
    assert [e["type"] for e in rest].count("exit") == 1
    # Found by name: the new process never listed sandboxes.
    assert modal_control_plane.calls()["SandboxListV2"] == 0


async def test_a_long_poll_keeps_the_channel_open_past_the_idle_period(
    modal_control_plane: ControlPlane,
) -> None:
    modal_control_plane.publish_image(IMAGE, "im-channeltestimage0000")
    driver = ModalDriver(
        ModalSettings(app_name=APP, default_image_name=IMAGE, channel_idle_seconds=1)
    )
    workspace_id = await _workspace(driver)
    client = await driver.connect(workspace_id)
    started, _ = await client.request("exec.start", {"command": "sleep 3; echo late"})
    cursor = 0
    # A waiting reader sends no bytes for three idle periods, and still gets its answer.
    page = await client.read_events(started["exec_id"], cursor, wait_seconds=20)
    while "late" not in _stdout(page.events):
        cursor = page.next_cursor
        page = await client.read_events(started["exec_id"], cursor, wait_seconds=20)

    assert not client.closed
    assert len(driver._channels) == 1
    await driver.close()


class FakeOutput:
    """An exec's stdout as the SDK iterates it, fed by the test: chunks, then the end (normal,
    or an error)."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[bytes | Exception | None] = asyncio.Queue()
        self.taken = 0

    def put(self, item: bytes | Exception | None) -> None:
        self._queue.put_nowait(item)

    def __aiter__(self) -> FakeOutput:
        return self

    async def __anext__(self) -> bytes:
        item = await self._queue.get()
        self.taken += 1
        if item is None:
            raise StopAsyncIteration
        if isinstance(item, Exception):
            raise item
        return item


class FakeStdin:
    """The surface of the SDK's stdin the channel's writer uses."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.eof = False
        self.drain = SimpleNamespace(aio=self._drained)

    def write(self, data: bytes) -> None:
        self.written += data

    def write_eof(self) -> None:
        self.eof = True

    async def _drained(self) -> None:
        pass


class FakeExec:
    def __init__(self) -> None:
        self.stdout = FakeOutput()
        self.stdin = FakeStdin()


class Consumer:
    """Records what a transport pushes, and how much had arrived when the end was reported."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.ends: list[tuple[Exception | None, int]] = []

    def data(self, view: memoryview) -> None:
        self.chunks.append(bytes(view))

    def lost(self, exc: Exception | None) -> None:
        self.ends.append((exc, len(self.chunks)))


async def _taken(output: FakeOutput, count: int) -> None:
    """Until the channel has taken `count` items from the output (and handled each: nothing
    awaits between taking a chunk and passing it on)."""
    async with asyncio.timeout(10):
        while output.taken < count:
            await asyncio.sleep(0.01)


async def test_an_exec_channel_pushes_its_output_in_order_what_came_before_attach_first() -> None:
    process = FakeExec()
    channel = ExecChannel(process, idle_seconds=60)
    try:
        process.stdout.put(b"one ")
        process.stdout.put(b"two ")
        await _taken(process.stdout, 2)
        consumer = Consumer()

        assert channel.transport.attach(consumer.data, consumer.lost)
        assert consumer.chunks == [b"one ", b"two "]
        process.stdout.put(b"three ")
        process.stdout.put(b"four")
        await _taken(process.stdout, 4)
        assert consumer.chunks == [b"one ", b"two ", b"three ", b"four"]
        assert not consumer.ends and not channel.closed.is_set()

        process.stdout.put(None)
        await asyncio.wait_for(channel.closed.wait(), 10)
        # The end comes once, after the last chunk.
        assert consumer.ends == [(None, 4)]
    finally:
        await channel.close()
    assert consumer.ends == [(None, 4)]
    await asyncio.wait_for(channel.writer.wait_closed(), 10)
    assert process.stdin.eof


async def test_an_exec_channel_reports_a_broken_output_after_what_came_before_it() -> None:
    process = FakeExec()
    channel = ExecChannel(process, idle_seconds=60)
    broken = ConnectionError("the exec went away")
    try:
        process.stdout.put(b"last words")
        process.stdout.put(broken)
        await asyncio.wait_for(channel.closed.wait(), 10)
        consumer = Consumer()

        # All of it came before the consumer: the data first, then the end.
        assert channel.transport.attach(consumer.data, consumer.lost)
        assert consumer.chunks == [b"last words"]
        assert consumer.ends == [(broken, 1)]
    finally:
        await channel.close()
