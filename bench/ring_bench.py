"""The event ring through its Python API against a pure-Python baseline, measured in one run.

Prints tables (throughput, then wake-up latency) with the machine in the header; never asserts.
Run with `make bench`, or `python bench/ring_bench.py` inside the project's virtualenv.
"""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import sys
import threading
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from baseline_ring import BaselineRing
from modal_workspace_core import EventRing

RING_BYTES = 512 << 20

# Each throughput figure is the best of this many runs, ours and the baseline's alike: the
# machine is shared, and the best run is the one least disturbed by other work.
REPEATS = 3


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def timed(fn: Callable[[], int]) -> tuple[int, float]:
    started = time.perf_counter()
    count = fn()
    return count, time.perf_counter() - started


def fastest(runs: list[tuple[int, float]]) -> tuple[int, float]:
    """The run (count, seconds) with the highest rate."""
    return min(runs, key=lambda run: run[1] / run[0])


def best(measure: Callable[..., tuple[int, float]], *args: Any) -> tuple[int, float]:
    """The fastest of `REPEATS` runs of `measure(*args)`."""
    return fastest([measure(*args) for _ in range(REPEATS)])


# --- throughput ------------------------------------------------------------------------------


def ours_append(size: int, count: int) -> tuple[int, float, EventRing]:
    ring, data = EventRing(RING_BYTES), b"x" * size

    def run() -> int:
        append = ring.append
        for _ in range(count):
            append("stdout", data)
        return count

    return (*timed(run), ring)


def base_append(size: int, count: int) -> tuple[int, float, BaselineRing]:
    async def main() -> tuple[int, float, BaselineRing]:
        ring, data = BaselineRing(RING_BYTES), b"x" * size
        started = time.perf_counter()
        for _ in range(count):
            await ring.append("stdout", data)
        return count, time.perf_counter() - started, ring

    return asyncio.run(main())


def ours_append_many(size: int, count: int) -> tuple[int, float]:
    ring, batch = EventRing(RING_BYTES), [b"x" * size] * 1000

    def run() -> int:
        for _ in range(count // 1000):
            ring.append_many("stdout", batch)
        return count

    return timed(run)


def base_append_many(size: int, count: int) -> tuple[int, float]:
    async def main() -> tuple[int, float]:
        ring, batch = BaselineRing(RING_BYTES), [b"x" * size] * 1000
        started = time.perf_counter()
        for _ in range(count // 1000):
            await ring.append_many("stdout", batch)
        return count, time.perf_counter() - started

    return asyncio.run(main())


def ours_read(ring: EventRing, as_dicts: bool) -> tuple[int, float]:
    def run() -> int:
        cursor, events = 0, 0
        while True:
            page = ring.read(cursor, 1000, 65536)
            events += len(page.events) if as_dicts else len(page)
            if not as_dicts:
                page.to_json()
            cursor = page.next_cursor
            if not page.has_more:
                return events

    return timed(run)


def base_read(ring: BaselineRing, as_dicts: bool) -> tuple[int, float]:
    import json

    def run() -> int:
        cursor, events = 0, 0
        while True:
            page = ring.read(cursor, 1000, 65536)
            if as_dicts:
                events += len([json.loads(e) for e in page["events"]])
            else:
                events += len(page["events"])
                BaselineRing.page_json(page)
            cursor = page["next_cursor"]
            if not page["has_more"]:
                return events

    return timed(run)


def throughput_table() -> None:
    header = ("operation", " bytes", "  ours ev/s", "ours MB/s", "baseline ev/s", "ratio")
    print("| " + " | ".join(f"{h:<32}" if i == 0 else h for i, h in enumerate(header)) + " |")
    print(
        "|"
        + "|".join("-" * 34 if i == 0 else "-" * (len(h) + 1) + ":" for i, h in enumerate(header))
        + "|"
    )

    def row(name: str, size: int, ours: tuple[int, float], base: tuple[int, float]) -> None:
        o, b = ours[0] / ours[1], base[0] / base[1]
        print(
            f"| {name:<32} | {size:>6} | {o:>11,.0f} | {o * size / 1e6:>9.1f} "
            f"| {b:>13,.0f} | {o / b:>4.1f}x |"
        )

    for size, count in ((100, 100_000), (16 * 1024, 5_000)):
        # Each run's ring is dropped before the next run starts; the last one is read below.
        o_times, b_times = [], []
        for _ in range(REPEATS):
            o_ring = None
            o_count, o_secs, o_ring = ours_append(size, count)
            o_times.append((o_count, o_secs))
        for _ in range(REPEATS):
            b_ring = None
            b_count, b_secs, b_ring = base_append(size, count)
            b_times.append((b_count, b_secs))
        row("append (one call per event)", size, fastest(o_times), fastest(b_times))
        many = (best(ours_append_many, size, count), best(base_append_many, size, count))
        row("append_many (batches of 1000)", size, *many)
        pages = (best(ours_read, o_ring, False), best(base_read, b_ring, False))
        row("read + to_json, 64 KiB pages", size, *pages)
        dicts = (best(ours_read, o_ring, True), best(base_read, b_ring, True))
        row("read + events as dicts", size, *dicts)


# --- wake-up latency -------------------------------------------------------------------------


def async_latency(ring: EventRing | BaselineRing, rounds: int) -> list[float]:
    async def main() -> list[float]:
        samples = []
        for seq in range(rounds):
            waiter = asyncio.ensure_future(ring.wait_async(seq, 10.0))

            async def woke(w: asyncio.Future[bool] = waiter) -> float:
                await w
                return time.perf_counter()

            done = asyncio.ensure_future(woke())
            await asyncio.sleep(0.0005)  # the waiter is now parked
            started = time.perf_counter()
            if isinstance(ring, EventRing):
                ring.append("stdout", b"x")
            else:
                await ring.append("stdout", b"x")
            samples.append(await done - started)
        return samples

    return asyncio.run(main())


def async_latency_from_a_thread(ring: EventRing | BaselineRing, rounds: int) -> list[float]:
    """An awaitable on the loop, the append from another thread (the baseline hands its append
    to the loop with `run_coroutine_threadsafe`, the plain way to reach an asyncio ring)."""

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        go = threading.Semaphore(0)
        appended_at: list[float] = []

        def appender() -> None:
            for _ in range(rounds):
                go.acquire()
                time.sleep(0.0005)  # the waiter is now parked
                appended_at.append(time.perf_counter())
                if isinstance(ring, EventRing):
                    ring.append("stdout", b"x")
                else:
                    asyncio.run_coroutine_threadsafe(ring.append("stdout", b"x"), loop)

        thread = threading.Thread(target=appender)
        thread.start()
        samples = []
        for seq in range(rounds):
            waiter = asyncio.ensure_future(ring.wait_async(seq, 10.0))
            await asyncio.sleep(0)  # let the baseline's coroutine take its condition
            go.release()
            await waiter
            samples.append(time.perf_counter() - appended_at[seq])
        thread.join()
        return samples

    return asyncio.run(main())


def thread_latency(ring: EventRing | BaselineRing, rounds: int) -> list[float]:
    woke_at: list[float] = []
    recorded = threading.Semaphore(0)

    def waiter() -> None:
        for seq in range(rounds):
            ring.wait(seq, 10.0)
            woke_at.append(time.perf_counter())
            recorded.release()

    thread = threading.Thread(target=waiter)
    thread.start()
    samples = []
    append = ring.append if isinstance(ring, EventRing) else ring.append_blocking
    for _ in range(rounds):
        time.sleep(0.0005)
        started = time.perf_counter()
        append("stdout", b"x")
        recorded.acquire()
        samples.append(woke_at[-1] - started)
    thread.join()
    return samples


def latency_table(rounds: int = 1000) -> None:
    header = ("ours median µs", "ours p99 µs", "base median µs", "base p99 µs")
    print(f"| {'wake-up after append':<29} | " + " | ".join(header) + " |")
    print("|" + "-" * 31 + "|" + "|".join("-" * (len(h) + 1) + ":" for h in header) + "|")

    def stats(samples: list[float]) -> tuple[float, float]:
        ordered = sorted(samples)
        return statistics.median(ordered) * 1e6, ordered[int(len(ordered) * 0.99)] * 1e6

    for name, measure in (
        ("asyncio awaitable", async_latency),
        ("asyncio, append from a thread", async_latency_from_a_thread),
        ("blocked thread", thread_latency),
    ):
        om, op = stats(measure(EventRing(1 << 20), rounds))
        bm, bp = stats(measure(BaselineRing(1 << 20), rounds))
        print(f"| {name:<29} | {om:>14.1f} | {op:>11.1f} | {bm:>14.1f} | {bp:>11.1f} |")


def call_floor_table() -> None:
    """What one call through the Python API costs before any event is stored: the floor under
    the one-call-per-event rows."""
    ring, full, data = EventRing(1 << 20), EventRing(1 << 20), b"x" * 100
    for _ in range(20_000):
        full.append("stdout", data)  # full: each append below evicts, memory is recycled
    names = {"ring": ring, "full": full, "data": data}
    calls = [
        ("attribute read (ring.max_bytes)", "ring.max_bytes"),
        ('append("stdout", b"") (no event)', 'ring.append("stdout", b"")'),
        ("append 100 B into a full ring", 'full.append("stdout", data)'),
    ]
    print(f"| {'one call':<33} | ns per call |")
    print("|" + "-" * 35 + "|------------:|")
    for name, statement in calls:
        runs = timeit.repeat(statement, number=100_000, repeat=5, globals=names)
        print(f"| {name:<33} | {min(runs) / 100_000 * 1e9:>11.0f} |")


def main() -> None:
    print(
        f"\n## Python API vs pure-Python baseline — {os.cpu_count()} cores, {cpu_model()}, "
        f"Python {platform.python_version()}\n"
    )
    throughput_table()
    print()
    latency_table()
    print()
    call_floor_table()


if __name__ == "__main__":
    main()
