"""The agent's streams against a real daemon: memory bounds under a flood with exact drop counts,
fairness between execs on one channel, resuming after a lost `connect`, restarts after kill -9,
files and watches over the wire."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_wire import AGENT, AgentError, Daemon, Wire, output, start_daemon, temp_base


@pytest.fixture
def base() -> Iterator[Path]:
    yield from temp_base()


def test_a_flood_keeps_the_daemon_memory_bounded_and_a_slow_reader_sees_exact_drops(
    base: Path,
) -> None:
    d = start_daemon(base, "--max-log-bytes", "16M", "--max-total-log-bytes", "48M")
    try:
        w = d.wire()
        baseline = d.rss_kib()
        flood = 256 << 20
        exec_id = w.call(
            "exec.start",
            {"argv": ["bash", "-c", f"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {flood}"]},
        )["exec_id"]
        # A slow reader: one page of credit, then nothing until the flood is over.
        w.call("subscribe", {"stream": exec_id, "cursor": 0, "credit": 1})
        while not w.pages.get(exec_id):
            w.frame()
        first = w.pages[exec_id][0]
        peak = baseline
        while True:
            peak = max(peak, d.rss_kib())
            status = w.call("exec.status", {"exec_id": exec_id})
            if status["state"] not in ("starting", "running"):
                break
            time.sleep(0.05)
        assert status["state"] == "finished" and status["returncode"] == 0
        assert peak - baseline < 64 << 10, f"RSS grew from {baseline} KiB to {peak} KiB"
        du = sum(p.stat().st_size for p in d.state.rglob("*.seg"))
        assert du <= (48 << 20) + (2 << 20), du

        cursor = first["next_cursor"]
        w.credit(exec_id, 1 << 30)
        while len(w.pages[exec_id]) < 2:
            w.frame()
        resumed = w.pages[exec_id][1]
        assert resumed["cursor_expired"]
        assert resumed["dropped_events"] == resumed["first_seq"] - 1 - cursor
        assert resumed["events"][0]["seq"] == resumed["first_seq"]
        # Exact bytes: the output cursor 0 lost is what this reader lost plus the output it saw.
        from_start = w.read_page(exec_id, 0, max_events=1)
        seen = sum(len(e.get("data", "").encode()) for e in first["events"])
        assert from_start["dropped_bytes"] == resumed["dropped_bytes"] + seen
        # The rest arrives in order, without holes, up to the exit.
        while not (w.pages[exec_id][-1]["closed"] and not w.pages[exec_id][-1]["has_more"]):
            w.credit(exec_id, 1 << 30)
            w.frame()
        seqs = [e["seq"] for p in w.pages[exec_id][1:] for e in p["events"]]
        assert seqs == list(range(resumed["first_seq"], seqs[-1] + 1))
        exits = [e for p in w.pages[exec_id] for e in p["events"] if e["type"] == "exit"]
        assert exits[0]["returncode"] == 0
    finally:
        d.stop()


def test_a_flooding_exec_does_not_starve_another_on_the_same_channel(base: Path) -> None:
    d = start_daemon(base)
    try:
        w = d.wire()
        flood = w.call("exec.start", {"argv": ["yes", "flood-flood-flood-flood"]})["exec_id"]
        ticker = w.call(
            "exec.start",
            {"argv": ["bash", "-c", "for i in $(seq 1 10); do date +%s.%N; sleep 0.1; done"]},
        )["exec_id"]
        w.call("subscribe", {"stream": flood, "cursor": 0, "credit": 4 << 20})
        w.call("subscribe", {"stream": ticker, "cursor": 0, "credit": 4 << 20})
        lags: list[float] = []
        deadline = time.monotonic() + 60
        while not any(e["type"] == "exit" for e in _events(w, ticker)):
            assert time.monotonic() < deadline, "the ticker's events never all arrived"
            frame = w.frame()
            stream = frame.header.get("stream")
            if stream == flood:
                w.credit(flood, len(frame.payload) + 64)
            elif stream == ticker:
                for e in w.pages[ticker][-1]["events"]:
                    if e["type"] == "stdout":
                        lags.extend(time.time() - float(t) for t in e["data"].split())
        w.call("exec.cancel", {"exec_id": flood, "grace_seconds": 1})
        assert len(lags) == 10
        # Generous: a starved stream would wait for the flood (forever); a fair one, a page.
        assert max(lags) < 5.0, lags
        assert len(w.pages[flood]) > 10, "the flood was served too"
    finally:
        d.stop()


def _events(w: Wire, stream: str) -> list[dict[str, Any]]:
    return [e for p in w.pages.get(stream, []) for e in p["events"]]


LINES = "for i in $(seq 1 3000); do echo line-$i; [ $((i % 500)) = 0 ] && sleep 0.2; done; true"


def connect_process(d: Daemon) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*AGENT, "connect", "--socket", d.socket],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_after_the_connect_process_dies_a_resubscribe_loses_and_repeats_nothing(
    base: Path,
) -> None:
    d = start_daemon(base)
    try:
        proc = connect_process(d)
        w = Wire.process(proc)
        exec_id = w.call(
            "exec.start",
            {"argv": ["bash", "-c", LINES]},
        )["exec_id"]
        w.call("subscribe", {"stream": exec_id, "cursor": 0, "credit": 1})
        got: list[dict[str, Any]] = []
        while len(got) < 5:
            frame = w.frame()
            if frame.kind == 4:
                got.extend(w.pages[exec_id][-1]["events"])
                w.credit(exec_id, 1)
        cursor = w.pages[exec_id][-1]["next_cursor"]
        proc.kill()  # mid-stream: pages may be in flight
        proc.wait(30)

        proc2 = connect_process(d)
        try:
            w2 = Wire.process(proc2)
            w2.call("subscribe", {"stream": exec_id, "cursor": cursor, "credit": 1 << 30})
            while not (
                w2.pages.get(exec_id)
                and w2.pages[exec_id][-1]["closed"]
                and not w2.pages[exec_id][-1]["has_more"]
            ):
                w2.frame()
                w2.credit(exec_id, 1 << 30)
            got.extend(_events(w2, exec_id))
            assert [e["seq"] for e in got] == list(range(1, len(got) + 1))
            text = output(got).decode()
            assert text == "".join(f"line-{i}\n" for i in range(1, 3001))
            proc2.stdin.close()  # type: ignore[union-attr]
            assert proc2.wait(30) == 0, "connect exits 0 once the channel closes"
        finally:
            proc2.kill()
    finally:
        d.stop()


def test_a_daemon_killed_and_restarted_reports_earlier_execs_and_running_ones_as_lost(
    base: Path,
) -> None:
    d = start_daemon(base)
    w = d.wire()
    done = w.call("exec.start", {"argv": ["echo", "finished-before"]})["exec_id"]
    w.wait_done(done)
    running = w.call("exec.start", {"argv": ["bash", "-c", "echo up; exec sleep 1000"]})["exec_id"]
    while b"up" not in output(w.read_all(running)):
        time.sleep(0.05)
    pid = w.call("exec.status", {"exec_id": running})["pid"]
    d.stop(signal.SIGKILL)
    os.killpg(pid, signal.SIGKILL)  # orphaned by the kill: not the new daemon's

    d2 = start_daemon(base)
    try:
        w2 = d2.wire()
        listed = {s["exec_id"]: s for s in w2.call("exec.list")["execs"]}
        assert listed[done]["state"] == "finished" and listed[done]["returncode"] == 0
        assert output(w2.read_all(done)) == b"finished-before\n"
        assert listed[running]["state"] == "lost"
        events = w2.read_all(running)
        assert events[-1]["type"] == "status" and events[-1]["state"] == "lost"
        assert not any(e["type"] == "exit" for e in events)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        with pytest.raises(AgentError) as err:
            w2.call("exec.input", {"exec_id": running}, b"x")
        assert err.value.code == "conflict"
    finally:
        d2.stop()


def test_files_are_contained_and_edited_over_the_wire(base: Path) -> None:
    d = start_daemon(base)
    try:
        w = d.wire()
        w.call("file.write", {"path": "src/a.txt", "create_parents": True}, b"one\r\ntwo\r\n")
        edit = w.call("file.edit", {"path": "src/a.txt", "old": "two\n", "new": "three\n"})
        assert edit["replacements"] == 1 and edit["crlf"]
        meta, data = w.response(w.submit("file.read", {"path": "src/a.txt"}))
        assert data == b"one\r\nthree\r\n" and meta["eof"]
        assert w.call("file.stat", {"path": "src/a.txt"})["kind"] == "file"
        os.symlink("/etc", d.root / "etc-link")
        for path, code in [("../outside", "invalid_argument"), ("etc-link/passwd", "permission")]:
            with pytest.raises(AgentError) as err:
                w.call("file.read", {"path": path})
            assert err.value.code == code, path
            assert str(d.root.resolve()) not in err.value.message
        hits = w.call("file.grep", {"path": ".", "pattern": "three"})["hits"]
        assert [h["path"] for h in hits] == ["/workspace/src/a.txt"]
    finally:
        d.stop()


def test_an_agent_in_a_host_directory_speaks_paths_under_workspace(base: Path) -> None:
    d = start_daemon(base)
    try:
        w = d.wire()
        assert not str(d.root).startswith("/workspace")
        a_txt = {"path": "/workspace/src/a.txt", "create_parents": True}
        wrote = w.call("file.write", a_txt, b"hi")
        assert wrote["path"] == "/workspace/src/a.txt"
        assert (d.root / "src" / "a.txt").read_bytes() == b"hi"
        meta, data = w.response(w.submit("file.read", {"path": "/workspace/src/a.txt"}))
        assert (meta["path"], data) == ("/workspace/src/a.txt", b"hi")
        assert w.call("file.stat", {"path": "/workspace"})["path"] == "/workspace"
        listed = w.call("file.list", {"path": "/workspace", "depth": 1})
        assert [e["path"] for e in listed["entries"]] == ["/workspace/src", "/workspace/src/a.txt"]
        hits = w.call("file.glob", {"path": "/workspace/src", "pattern": "*.txt"})["hits"]
        assert [h["path"] for h in hits] == ["/workspace/src/a.txt"]
        edit = w.call("file.edit", {"path": "src/a.txt", "old": "hi", "new": "ho"})
        assert edit["path"] == "/workspace/src/a.txt"
        assert w.call("file.mkdir", {"path": "/workspace/d"})["path"] == "/workspace/d"
        removed = w.call("file.remove", {"path": "/workspace/d", "recursive": True})
        assert removed["path"] == "/workspace/d"
        watch = w.call("watch.start", {"path": "/workspace/src"})
        assert watch["path"] == "/workspace/src"
        w.call("watch.cancel", {"watch_id": watch["watch_id"]})
        # Named under /workspace, an escape is as refused as ever, and the host root unsaid.
        os.symlink("/etc", d.root / "etc-link")
        for path, code in [
            ("/workspace/../outside", "invalid_argument"),
            ("/workspace/etc-link/passwd", "permission"),
        ]:
            with pytest.raises(AgentError) as err:
                w.call("file.read", {"path": path})
            assert err.value.code == code, path
            assert str(d.root.resolve()) not in err.value.message
        with pytest.raises(AgentError) as err:
            w.call("file.write", {"path": "/workspace/etc-link/x"}, b"x")
        assert err.value.code == "permission"
    finally:
        d.stop()


def test_a_watch_streams_fs_events_and_ends_with_a_status(base: Path) -> None:
    d = start_daemon(base, "--max-watches", "1")
    try:
        w = d.wire()
        watch = w.call("watch.start", {"path": "."})
        watch_id = watch["watch_id"]
        assert watch["state"] == "watching"
        with pytest.raises(AgentError) as err:
            w.call("watch.start", {"path": "."})
        assert err.value.code == "limit"
        w.call("subscribe", {"stream": watch_id, "cursor": 0, "credit": 1 << 20})
        (d.root / "new.txt").write_text("x")
        (d.root / "new.txt").rename(d.root / "moved.txt")
        deadline = time.monotonic() + 30
        while not any(e.get("kind") == "rename" for e in _events(w, watch_id)):
            assert time.monotonic() < deadline
            w.frame()
        events = _events(w, watch_id)
        assert events[0] == {**events[0], "type": "fs", "kind": "create", "path": "new.txt"}
        rename = next(e for e in events if e.get("kind") == "rename")
        assert rename["path"] == "moved.txt" and rename["from"] == "new.txt"
        w.call("watch.cancel", {"watch_id": watch_id})
        while not (w.pages[watch_id][-1]["closed"]):
            w.frame()
        assert _events(w, watch_id)[-1] == {
            **_events(w, watch_id)[-1],
            "type": "status",
            "state": "cancelled",
        }
        # The slot is free again.
        w.call("watch.cancel", {"watch_id": w.call("watch.start", {"path": "."})["watch_id"]})
    finally:
        d.stop()
