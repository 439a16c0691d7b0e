"""A workspace's metrics stream against real daemons: a command that allocates 300 MiB and burns
a core shows in the samples within two intervals (through the operations, on the local driver);
a read after a gap gets `cursor_expired` with exact counts; the interval's bounds; the latest
sample in workspace_get only while a channel is open and the workspace was used lately. An
experiment's `::metric` lines come into the stream as `reported` events carrying its exec id,
between the samples (and `workspace_metrics` still answers a sample); a plain exec's do not.

GPUs are sampled here with a fake `nvidia-smi` put first on the PATH of a daemon started
directly (a shell script that prints, at each interval, the lines a test writes beside it): one
GPU, eight, a GPU that disappears mid-run, garbage lines (ignored and counted). Not through the
local driver: its daemon runs in the sandbox, whose PATH holds only system directories, and the
agent never runs an `nvidia-smi` the workspace could have written."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import modal_workspace_core as mwc
import pytest
from agent_wire import AgentError, Wire, start_daemon, temp_base
from fake_nvidia_smi import gpu_line, install, put
from modal_workspace_core.config import load_settings

MIB = 1 << 20

# Allocates 300 MiB (written, so that it is resident), says so, then burns a core.
BURNER = (
    "python3 -c 'import sys\n"
    "block = bytearray(300 << 20)\n"
    'block[::4096] = b"x" * len(block[::4096])\n'
    'print("ready", flush=True)\n'
    "while True: pass'"
)


@pytest.fixture
async def wss(tmp_path: Path) -> AsyncIterator[mwc.Workspaces]:
    settings = load_settings({}, data_root=tmp_path / "data")
    async with mwc.Workspaces(settings=settings) as client:
        yield client


@pytest.fixture
def base() -> Iterator[Path]:
    yield from temp_base()


def extra(event: Any, name: str) -> Any:
    """A field of a metrics event (the event model keeps what the agent adds)."""
    return (event.model_extra or {}).get(name)


async def test_a_command_that_allocates_300_mib_and_burns_a_core_shows_within_two_intervals(
    wss: mwc.Workspaces,
) -> None:
    ws = await wss.create()
    metrics = await ws.metrics(interval_seconds=0.5)
    assert metrics.stream_id.startswith("mt-") and metrics.interval_seconds == 0.5
    started = await ws.realtime_exec_start(BURNER)
    try:
        cursor, ready = 0, False
        while not ready:
            page = await ws.realtime_exec_events(started.exec_id, cursor=cursor, wait_seconds=10)
            assert not page.done, page
            ready = any("ready" in (e.data or "") for e in page.events)
            cursor = page.next_cursor
        # From the moment the memory is held: the first two samples after it.
        latest = (await ws.metrics()).sample
        after = latest["seq"] if latest else 0
        samples: list[Any] = []
        while len(samples) < 2:
            page = await ws.stream_events(metrics.stream_id, cursor=after, wait_seconds=10)
            assert page.state == "running" and not page.done
            samples += [e for e in page.events if e.type == "metrics"]
            after = page.next_cursor
        samples = samples[:2]

        def burning(sample: Any) -> dict[str, Any] | None:
            top = extra(sample, "cpu")["top"]
            return next((p for p in top if p["rss_bytes"] >= 300 * MIB), None)

        shown = [burning(s) for s in samples]
        assert any(shown), [s.model_dump() for s in samples]
        process = next(p for p in shown if p)
        assert process["name"] == "python3"
        # A core, on a machine that other work may share.
        assert process["cpu_percent"] > 25, process
        last = samples[-1]
        assert extra(last, "cpu")["percent"] > 25
        assert extra(last, "memory")["rss_bytes"] >= 300 * MIB
        assert extra(last, "processes") >= 1
        assert extra(last, "disk")["total_bytes"] > 0
        # The argv (the program's text) is never shown, only the command's name.
        assert "bytearray" not in json.dumps([s.model_dump() for s in samples])
    finally:
        await ws.realtime_exec_cancel(started.exec_id, grace_seconds=1)


async def test_an_interval_out_of_bounds_is_refused_naming_it(wss: mwc.Workspaces) -> None:
    ws = await wss.create()
    for bad in (0.1, 61):
        with pytest.raises(mwc.InvalidArgumentError) as refused:
            await ws.metrics(interval_seconds=bad)
        assert refused.value.field == "interval_seconds"


async def test_workspace_get_carries_the_latest_sample_only_while_a_channel_is_open(
    wss: mwc.Workspaces, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = await wss.create()
    first = await ws.metrics(interval_seconds=0.5)
    deadline = time.monotonic() + 30
    while (await ws.metrics()).sample is None:
        assert time.monotonic() < deadline, "no sample in time"
    sample = (await ws.refresh()).metrics
    assert sample is not None and sample["type"] == "metrics" and sample["seq"] >= 1
    assert first.stream_id
    svc = wss.service
    # Unused for a while, the workspace's open channel is not asked (asking would keep it open).
    unused_since = time.monotonic() - 60
    with monkeypatch.context() as patch:
        patch.setattr(svc.usage, "last_used", lambda _workspace_id: unused_since)
        assert (await ws.refresh()).metrics is None
    assert svc.channels.is_open(ws.id)
    await svc.drop_agent(ws.id)
    info = await ws.refresh()
    assert info.metrics is None
    assert "metrics" not in info.model_dump(mode="json")
    assert not svc.channels.is_open(ws.id), "getting a workspace opened no channel"


# A run that reports five steps a little apart (samples come between them), a line that says it
# is a metric line and is not, and one value on stderr.
STEPS = (
    'for step in 1 2 3 4 5; do echo "::metric loss=$((10 - step)) step=$step"; sleep 0.3; done; '
    "echo '::metric loss=oops'; echo '::metric {\"acc\": 0.5}' >&2"
)


async def reported_until(
    ws: mwc.Workspace, stream_id: str, exec_id: str, count: int
) -> tuple[list[Any], list[Any]]:
    """The stream's `reported` events of `exec_id` (the first `count`) and every sample read
    meanwhile, from the stream's start."""
    reported: list[Any] = []
    samples: list[Any] = []
    cursor, deadline = 0, time.monotonic() + 60
    while len(reported) < count:
        assert time.monotonic() < deadline, f"{len(reported)} of {count} reported in time"
        page = await ws.stream_events(stream_id, cursor=cursor, wait_seconds=5)
        assert not page.cursor_expired, "the ring keeps minutes of a workspace this quiet"
        reported += [e for e in page.events if e.type == "reported"]
        samples += [e for e in page.events if e.type == "metrics"]
        cursor = page.next_cursor
    assert all(extra(e, "exec_id") == exec_id for e in reported), reported
    return reported, samples


async def test_an_experiments_metric_lines_are_in_the_metrics_stream_with_its_exec_id(
    wss: mwc.Workspaces,
) -> None:
    ws = await wss.create()
    metrics = await ws.metrics(interval_seconds=0.5)
    run = await wss.call("experiment_start", workspace_id=ws.id, command=STEPS)
    exec_id = run.model_dump()["exec_id"]
    reported, samples = await reported_until(ws, metrics.stream_id, exec_id, 6)
    # Read at once, before the next sample: the stream's newest event is a reported one.
    latest = (await ws.metrics()).sample
    assert latest is not None and latest["type"] == "metrics", latest
    assert isinstance(latest["cpu"], dict)
    stdout = [extra(e, "values") for e in reported if extra(e, "stream") == "stdout"]
    assert stdout == [{"loss": 10.0 - step, "step": float(step)} for step in range(1, 6)]
    stderr = [extra(e, "values") for e in reported if extra(e, "stream") == "stderr"]
    assert stderr == [{"acc": 0.5}]
    assert all(extra(e, "dropped") == 0 for e in reported)
    # An event counts the refused lines before it: `loss=oops` follows every stdout report, and
    # the stderr one comes before or after it (two pipes, no order between them).
    assert all(extra(e, "refused") == 0 for e in reported if extra(e, "stream") == "stdout")
    assert extra(reported[-1], "refused") in (0, 1)
    assert [e.seq for e in reported] == sorted(e.seq for e in reported)
    # The sampler went on while the run reported: samples between its first and last report.
    first, last = reported[0].seq, reported[-1].seq
    assert any(first < s.seq < last for s in samples), [s.seq for s in samples]
    assert all(extra(s, "cpu") is not None for s in samples)


async def test_a_plain_execs_metric_lines_stay_out_of_the_metrics_stream(
    wss: mwc.Workspaces,
) -> None:
    ws = await wss.create()
    metrics = await ws.metrics(interval_seconds=0.5)
    async for _ in ws.exec_stream("echo '::metric loss=1'; echo '::metric {\"a\": 2}' >&2"):
        pass
    # A run after it: its reports come, the plain exec's never did.
    run = await wss.call("experiment_start", workspace_id=ws.id, command="echo '::metric b=3'")
    reported, _ = await reported_until(ws, metrics.stream_id, run.model_dump()["exec_id"], 1)
    assert [extra(e, "values") for e in reported] == [{"b": 3.0}]


# --- against a daemon of its own ---------------------------------------------------------------


def status(w: Wire) -> dict[str, Any]:
    return w.call("metrics.status")


def wait_seq(w: Wire, seq: int, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        got = status(w)
        if got["last_seq"] >= seq:
            return got
        assert time.monotonic() < deadline, f"no sample {seq} in time: {got}"
        time.sleep(0.1)


def read(w: Wire, stream: str, cursor: int) -> dict[str, Any]:
    """One page of `stream` from `cursor`, as the agent pushes it to a subscriber."""
    w.pages.pop(stream, None)
    w.call("subscribe", {"stream": stream, "cursor": cursor, "credit": 1})
    while not w.pages.get(stream):
        w.frame()
    w.call("unsubscribe", {"stream": stream})
    return w.pages[stream][0]


def test_a_read_after_a_gap_gets_cursor_expired_with_exact_counts(base: Path) -> None:
    d = start_daemon(base, "--metrics-interval", "0.5", "--metrics-ring-bytes", "4K")
    try:
        w = d.wire()
        first = wait_seq(w, 2)
        stream = first["stream_id"]
        page = read(w, stream, 0)
        assert not page["cursor_expired"] and page["events"][0]["seq"] == 1
        assert page["state"] == "running" and not page["done"]
        seen = page["next_cursor"]
        # The gap: more samples than the ring keeps come and go.
        later = wait_seq(w, seen + 16)
        assert later["stream_id"] == stream
        page = read(w, stream, seen)
        assert page["cursor_expired"]
        assert page["dropped_events"] == page["first_seq"] - 1 - seen
        assert page["dropped_bytes"] == 0, "samples carry no output"
        assert page["events"][0]["seq"] == page["first_seq"]
        seqs = [e["seq"] for e in page["events"]]
        assert seqs == list(range(page["first_seq"], page["first_seq"] + len(seqs)))
        assert all(e["type"] == "metrics" for e in page["events"])
        # A subscriber that keeps up loses nothing: it goes on from where it is.
        page = read(w, stream, seqs[-1])
        assert not page["cursor_expired"] and page["events"][0]["seq"] == seqs[-1] + 1
    finally:
        d.stop()


def test_the_interval_is_set_within_bounds_and_refused_outside(base: Path) -> None:
    d = start_daemon(base, "--metrics-interval", "off")
    try:
        w = d.wire()
        before = status(w)
        assert before["interval_seconds"] is None and before["sample"] is None
        assert before["stream_id"].startswith("mt-") and before["state"] == "running"
        for bad in (0.49, 60.5, "2"):
            with pytest.raises(AgentError) as refused:
                w.call("metrics.set", {"interval_seconds": bad})
            assert refused.value.code == "invalid_argument"
            assert refused.value.field == "interval_seconds"
        assert w.call("metrics.set", {"interval_seconds": 0.5})["interval_seconds"] == 0.5
        sample = wait_seq(w, 1)["sample"]
        assert sample["type"] == "metrics" and sample["interval_seconds"] == 0.5
        assert "gpus" not in sample, "no nvidia-smi on the PATH: no GPU field"
        with pytest.raises(AgentError) as unknown:
            w.call("subscribe", {"stream": "mt-" + "0" * 32, "cursor": 0})
        assert unknown.value.code == "not_found"
    finally:
        d.stop()


# --- GPUs, with a fake nvidia-smi on the daemon's PATH ------------------------------------------


def gpus_of(sample: dict[str, Any]) -> list[int]:
    return [g["index"] for g in sample.get("gpus") or []]


def until(w: Wire, ok: Any, timeout: float = 30) -> dict[str, Any]:
    """The first sample for which `ok` holds, waiting up to `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        sample = status(w)["sample"] or {}
        if ok(sample):
            return sample
        assert time.monotonic() < deadline, f"not seen in time; last sample: {sample}"
        time.sleep(0.1)


def test_gpus_from_a_fake_nvidia_smi_one_eight_one_gone_and_garbage(base: Path) -> None:
    """The daemon's PATH starts with the fake `nvidia-smi`'s directory (fake_nvidia_smi.py)."""
    tools = base / "fake-tools"
    install(tools)
    put(tools, "gpus", gpu_line(0))
    put(tools, "apps", "GPU-00000000, 4242, /usr/bin/python3, 512\n")
    env = {**os.environ, "PATH": f"{tools}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    d = start_daemon(base, "--metrics-interval", "0.5", env=env)
    try:
        w = d.wire()
        one = until(w, lambda s: gpus_of(s) == [0] and s["gpus"][0]["processes"])
        gpu = one["gpus"][0]
        assert gpu["uuid"] == "GPU-00000000" and gpu["name"] == "NVIDIA Fake"
        assert gpu["memory_used_bytes"] == 1024 * MIB
        assert gpu["memory_total_bytes"] == 81920 * MIB
        assert (gpu["temperature_celsius"], gpu["power_watts"]) == (40, 70.3)
        assert gpu["processes"] == [
            {"pid": 4242, "name": "python3", "memory_used_bytes": 512 * MIB}
        ]
        assert one["gpu_garbage_lines"] == 0

        put(tools, "gpus", "".join(gpu_line(i) for i in range(8)))
        eight = until(w, lambda s: gpus_of(s) == list(range(8)))
        assert [g["utilization_percent"] for g in eight["gpus"]] == [i * 10 for i in range(8)]

        # GPU 5 disappears mid-run; a line of garbage comes with every reading from then on.
        put(tools, "gpus", "".join(gpu_line(i) for i in range(8) if i != 5) + "what is this\n")
        seven = until(w, lambda s: gpus_of(s) == [0, 1, 2, 3, 4, 6, 7])
        assert seven["gpu_garbage_lines"] >= 1
        more = until(w, lambda s: s["gpu_garbage_lines"] > seven["gpu_garbage_lines"])
        assert gpus_of(more) == [0, 1, 2, 3, 4, 6, 7], "garbage is ignored, not a GPU"
        # The sampler's own readers are not the workspace's processes.
        top = [p["name"] for p in more["cpu"]["top"]]
        assert "nvidia-smi" not in top and "sleep" not in top
    finally:
        d.stop()
