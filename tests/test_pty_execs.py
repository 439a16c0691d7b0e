"""Realtime execs on a pseudo-terminal, through the Python API over the real local driver and
agent: a real tty, its size and resizing (`stty size`, SIGWINCH), typed input, the stream read
by several viewers each from its own cursor, and the refusals (no terminal, ended, bad sizes)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import modal_workspace_core as mwc
import pytest
from modal_workspace_core.config import load_settings
from modal_workspace_core.errors import ConflictError, InvalidArgumentError, WorkspaceError

# Far above what any step here needs, even on a loaded machine: only a hang trips it.
LIMIT = 60


@pytest.fixture
async def wss(tmp_path: Path) -> AsyncIterator[mwc.Workspaces]:
    settings = load_settings({}, data_root=tmp_path / "data")
    async with mwc.Workspaces(settings=settings) as client:
        yield client


@pytest.fixture
async def ws(wss: mwc.Workspaces) -> mwc.Workspace:
    return await wss.create()


def text_of(events: list[Any]) -> str:
    data = b""
    for e in events:
        if e.type == "stdout":
            data += base64.b64decode(e.data_b64) if e.data_b64 else (e.data or "").encode()
    # The terminal ends its lines with CR LF.
    return data.decode().replace("\r\n", "\n")


class Viewer:
    """One reader of an exec's stream, from its own cursor, page by page."""

    def __init__(self, ws: mwc.Workspace, exec_id: str, cursor: int = 0) -> None:
        self.ws, self.exec_id, self.cursor = ws, exec_id, cursor
        self.events: list[Any] = []
        self.done = False

    async def page(self, max_events: int = 1000) -> None:
        page = await self.ws.realtime_exec_events(
            self.exec_id, cursor=self.cursor, wait_seconds=5, max_events=max_events
        )
        assert not page.cursor_expired
        self.events += page.events
        self.cursor, self.done = page.next_cursor, page.done

    async def until(self, needle: str) -> str:
        """Reads on until the output holds `needle`; the output so far."""
        async with asyncio.timeout(LIMIT):
            while needle not in text_of(self.events):
                assert not self.done, f"ended without {needle!r}: {text_of(self.events)!r}"
                await self.page()
        return text_of(self.events)

    async def to_the_end(self, max_events: int = 1000) -> str:
        async with asyncio.timeout(LIMIT):
            while not self.done:
                await self.page(max_events)
        return text_of(self.events)

    def seqs(self) -> list[int]:
        """Every seq the viewer saw, a merged event's whole range included."""
        seen: list[int] = []
        for e in self.events:
            start = (e.model_extra or {}).get("seq_start", e.seq)
            seen += range(start, e.seq + 1)
        return seen


async def start(ws: mwc.Workspace, command: str, rows: int = 24, cols: int = 80) -> str:
    started = await ws.realtime_exec_start(command, pty={"rows": rows, "cols": cols})
    return started.exec_id


async def test_a_pty_exec_runs_on_a_terminal_of_the_size_asked(ws: mwc.Workspace) -> None:
    probe = "tty; test -t 0 && echo stdin-is-a-terminal; echo term=$TERM; stty size"
    exec_id = await start(ws, probe, rows=33, cols=101)
    viewer = Viewer(ws, exec_id)
    lines = (await viewer.to_the_end()).splitlines()
    assert lines[0].startswith("/dev/pts/"), lines
    assert lines[1:] == ["stdin-is-a-terminal", "term=xterm-256color", "33 101"]
    assert (await ws.realtime_exec_status(exec_id)).returncode == 0
    # The same command without one: no terminal at all.
    plain = await ws.exec("tty; test -t 0 || echo no-terminal")
    assert plain.stdout == "not a tty\nno-terminal\n"


async def test_after_a_resize_stty_size_in_a_shell_loop_shows_the_new_size(
    ws: mwc.Workspace,
) -> None:
    exec_id = await start(ws, "while read line; do echo size:$(stty size); done; echo bye")
    viewer = Viewer(ws, exec_id)
    await ws.realtime_exec_input(exec_id, data="\n")
    await viewer.until("size:24 80")

    resized = await ws.realtime_exec_resize(exec_id, 40, 132)
    assert (resized.exec_id, resized.rows, resized.cols) == (exec_id, 40, 132)
    status = await ws.realtime_exec_status(exec_id)
    assert status.pty == {"rows": 40, "cols": 132}, "the status shows the size now"
    await ws.realtime_exec_input(exec_id, data="\n")
    await viewer.until("size:40 132")

    # End of input on a terminal is its EOF character (^D): `read` fails and the loop ends.
    await ws.realtime_exec_input(exec_id, eof=True)
    assert (await viewer.to_the_end()).endswith("bye\n")
    assert (await ws.realtime_exec_status(exec_id)).returncode == 0


async def test_a_program_trapping_sigwinch_sees_the_resize(ws: mwc.Workspace) -> None:
    command = "trap 'echo winch $(stty size)' WINCH; echo ready; while :; do sleep 0.1; done"
    exec_id = await start(ws, command)
    viewer = Viewer(ws, exec_id)
    await viewer.until("ready")
    await ws.realtime_exec_resize(exec_id, rows=30, cols=90)
    await viewer.until("winch 30 90")
    ended = await ws.realtime_exec_cancel(exec_id, grace_seconds=1)
    assert ended.state == "cancelled"


async def test_typed_input_arrives_and_the_terminal_echoes_it(ws: mwc.Workspace) -> None:
    exec_id = await start(ws, "read line; echo got:$line")
    accepted = await ws.realtime_exec_input(exec_id, data="hello there\n")
    assert accepted.accepted == len("hello there\n")
    out = await Viewer(ws, exec_id).to_the_end()
    assert out == "hello there\ngot:hello there\n"


async def test_viewers_each_read_everything_from_their_own_cursor(ws: mwc.Workspace) -> None:
    command = "for i in $(seq 1 300); do echo line $i; [ $((i % 50)) = 0 ] && sleep 0.1; done"
    exec_id = await start(ws, command)
    expected = "".join(f"line {i}\n" for i in range(1, 301))

    # Two viewers attached at once, from the start, read the whole stream.
    first, second = Viewer(ws, exec_id), Viewer(ws, exec_id)
    both = await asyncio.gather(first.to_the_end(max_events=3), second.to_the_end(max_events=7))
    assert both == [expected, expected]

    # One that left mid-way and comes back with its cursor misses nothing, repeats nothing.
    third = Viewer(ws, exec_id)
    await third.page(max_events=4)
    left_at = third.cursor
    assert 0 < left_at < first.cursor
    back = Viewer(ws, exec_id, cursor=left_at)
    await back.to_the_end(max_events=5)
    assert text_of(third.events + back.events) == expected
    assert third.seqs() + back.seqs() == list(range(1, first.cursor + 1)) == first.seqs()


async def test_a_resize_is_refused_without_a_terminal_and_once_ended(ws: mwc.Workspace) -> None:
    plain = await ws.realtime_exec_start("sleep 30")
    with pytest.raises(ConflictError, match="no terminal"):
        await ws.realtime_exec_resize(plain.exec_id, rows=30, cols=90)
    await ws.realtime_exec_cancel(plain.exec_id, grace_seconds=0)

    ended = await start(ws, "true")
    await Viewer(ws, ended).to_the_end()
    with pytest.raises(ConflictError, match="ended"):
        await ws.realtime_exec_resize(ended, rows=30, cols=90)
    assert (await ws.realtime_exec_status(ended)).pty == {"rows": 24, "cols": 80}


@pytest.mark.parametrize(
    ("size", "field"),
    [
        ({"rows": 0, "cols": 80}, "rows"),
        ({"rows": 501, "cols": 80}, "rows"),
        ({"rows": 24, "cols": 0}, "cols"),
        ({"rows": 24, "cols": 1001}, "cols"),
        ({"rows": 24}, "cols"),
    ],
)
async def test_bad_sizes_are_refused_naming_the_field(
    ws: mwc.Workspace, size: dict[str, int], field: str
) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        await ws.realtime_exec_start("true", pty=size)
    assert refused.value.field == f"pty.{field}"
    started = await start(ws, "sleep 30")
    with pytest.raises((InvalidArgumentError, TypeError)) as refused_resize:
        await ws.realtime_exec_resize(started, **size)
    if isinstance(refused_resize.value, InvalidArgumentError):
        assert refused_resize.value.field == field
    else:  # a required argument left out is Python's own refusal
        assert "cols" in str(refused_resize.value)
    await ws.realtime_exec_cancel(started, grace_seconds=0)


async def test_the_agent_itself_refuses_sizes_out_of_bounds(
    wss: mwc.Workspaces, ws: mwc.Workspace
) -> None:
    # The gateway's model refuses them first; the agent's check is the rule all the same.
    for args, field in [
        ({"argv": ["true"], "pty": {"rows": 501, "cols": 80}}, "pty.rows"),
        ({"argv": ["true"], "pty": {"rows": 24, "cols": 1001}}, "pty.cols"),
    ]:
        with pytest.raises(WorkspaceError) as refused:
            await wss.service.request(ws.id, "exec.start", args)
        assert (refused.value.code, refused.value.field) == ("invalid_argument", field)
