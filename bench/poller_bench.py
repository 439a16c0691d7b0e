"""Many REST long-pollers on one exec (issue 23): how long until every poller has a line the
process wrote, and what the pollers cost the gateway in memory, against the standard library's
HTTP server piping the same child in the same run. Prints a table; never asserts.

Run inside the project's virtualenv: `python bench/poller_bench.py [--pollers 200 1000]
[--lines 20] [--rounds 2]`. `bench/README.md` says what each row measures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shlex
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agent_stack import SERVE, TOKEN, Http, Server, baseline_server, cpu_model, gateway_server

# A process that waits `delay` seconds (every poller is parked by then), then writes its clock
# (CLOCK_MONOTONIC, shared by all processes) as one line per write, `n` times, `gap` apart:
# long enough for every poller to have the line and be parked again before the next.
STAMPER = """
import os, sys, time
n, gap, delay = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
time.sleep(delay)
for _ in range(n):
    os.write(1, b"%d\\n" % time.monotonic_ns())
    time.sleep(gap)
"""
WARMUP_LINES = 2  # the first lines also pay for first-use costs: not counted


def stamper(lines: int, pollers: int) -> list[str]:
    gap = 0.2 + pollers / 2000
    delay = 2.0 + pollers / 250
    return [sys.executable, "-c", STAMPER, str(lines), str(gap), str(delay)]


@dataclass
class Poll:
    """What one poller saw: a sample (µs from the write to this poller holding the page) per
    line, by line number."""

    delays: dict[int, float] = field(default_factory=dict)


async def long_poll(port: int, path: str, stdout_only: bool, seen: Poll) -> None:
    """One keep-alive connection following `path` by cursor to the end. It does no more work
    per page than it must before taking the time: the head, the body, the clock."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = f"Authorization: Bearer {TOKEN}\r\nHost: 127.0.0.1\r\n\r\n"
    cursor, line = 0, 0
    try:
        while True:
            writer.write(f"GET {path}?cursor={cursor}&wait_seconds=25 HTTP/1.1\r\n{head}".encode())
            status = await reader.readuntil(b"\r\n\r\n")
            now = time.monotonic_ns()
            length = 0
            for header in status.split(b"\r\n"):
                if header[:15].lower() == b"content-length:":
                    length = int(header[15:])
            body = await reader.readexactly(length)
            if not status.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"{path}: {status[:200]!r} {body[:300]!r}")
            page = json.loads(body)
            for event in page["events"]:
                if stdout_only and event.get("type") != "stdout":
                    continue
                for stamp in event["data"].split():
                    seen.delays[line] = (now - int(stamp)) / 1e3
                    line += 1
            cursor = page["next_cursor"]
            if page["done"]:
                return
    finally:
        writer.close()


class MemoryWatch:
    """The server's most RSS while the pollers follow, sampled every 20 ms from /proc."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.before = server.memory()[0]
        self.most = self.before
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self) -> None:
        while not self.stopped.wait(0.02):
            try:
                self.most = max(self.most, self.server.memory()[0])
            except (OSError, KeyError):
                return

    def added_mib(self) -> float:
        self.stopped.set()
        self.thread.join()
        return (self.most - self.before) / 1024


@dataclass
class Turn:
    delays: list[float]
    polls: int
    added_mib: float


def follow_all(port: int, path: str, pollers: int, stdout_only: bool) -> list[Poll]:
    async def run() -> list[Poll]:
        polls = [Poll() for _ in range(pollers)]
        await asyncio.gather(*(long_poll(port, path, stdout_only, p) for p in polls))
        return polls

    return asyncio.run(run())


def counted(polls: list[Poll], lines: int) -> list[float]:
    missing = sum(1 for p in polls for n in range(lines) if n not in p.delays)
    if missing:
        raise RuntimeError(f"{missing} (poller, line) pairs never arrived")
    return [p.delays[n] for p in polls for n in range(WARMUP_LINES, lines)]


def gateway_turn(lines: int, pollers: int, serve: Path | None = None) -> Turn:
    with gateway_server(serve or SERVE) as server:
        api = Http(server.port)
        try:
            ws = api.call("POST", "/api/workspaces", {})["workspace_id"]
            command = "exec " + shlex.join(stamper(lines, pollers))
            started = api.call("POST", f"/api/workspaces/{ws}/realtime-execs", {"command": command})
        finally:
            api.close()
        path = f"/api/workspaces/{ws}/realtime-execs/{started['exec_id']}/events"
        watch = MemoryWatch(server)
        polls = follow_all(server.port, path, pollers, stdout_only=True)
        return Turn(counted(polls, lines), pollers, watch.added_mib())


def stdlib_turn(lines: int, pollers: int) -> Turn:
    with baseline_server(stamper(lines, pollers), "stdlib") as server:
        watch = MemoryWatch(server)
        polls = follow_all(server.port, "/events", pollers, stdout_only=False)
        return Turn(counted(polls, lines), pollers, watch.added_mib())


ROWS: dict[str, tuple[str, Callable[[int, int], Turn]]] = {
    "gateway": ("REST: gateway (FastAPI/uvicorn, local driver)", gateway_turn),
    "stdlib": ("baseline: http.server (stdlib) piping the child", stdlib_turn),
}


def compare_with(serve: Path) -> None:
    """Adds a row for the gateway that `serve` (another checkout's `modal-workspace`) runs."""
    ROWS["other"] = (
        f"REST: the gateway of {serve.parent.parent.parent.name}",
        lambda lines, pollers: gateway_turn(lines, pollers, serve),
    )


def percentile(kept: list[float], q: float) -> float:
    return kept[min(len(kept) - 1, int(len(kept) * q))]


def table(pollers_list: list[int], lines: int, rounds: int) -> None:
    """Every row takes `rounds` turns, in the reverse order every other round, so that a change
    of the machine's load falls on all rows alike."""
    turns: dict[tuple[int, str], list[Turn]] = {}
    for turn in range(rounds):
        order = [(n, key) for n in pollers_list for key in ROWS]
        for n, key in order if turn % 2 == 0 else reversed(order):
            turns.setdefault((n, key), []).append(ROWS[key][1](lines, n))
    width = 50
    print(
        f"| {'a line reaches every poller':<{width}} | pollers | median ms |  p99 ms | max ms "
        "| added MiB | p99 ÷ baseline |"
    )
    print(
        f"|{'-' * (width + 2)}|--------:|----------:|--------:|-------:|----------:"
        "|---------------:|"
    )
    for n in pollers_list:
        p99s: dict[str, float] = {}
        for key, (name, _) in ROWS.items():
            kept = sorted(d for t in turns[(n, key)] for d in t.delays)
            p99s[key] = percentile(kept, 0.99)
            median, top = statistics.median(kept), kept[-1]
            added = max(t.added_mib for t in turns[(n, key)])
            ratio = f"{p99s['gateway'] / p99s[key]:.2f}x" if key != "gateway" else "—"
            print(
                f"| {name:<{width}} | {n:>7} | {median / 1e3:>9.1f} | {p99s[key] / 1e3:>7.1f} "
                f"| {top / 1e3:>6.1f} | {added:>9.1f} | {ratio:>14} |"
            )


def lift_descriptor_limit() -> None:
    # One connection per poller, in this one process.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pollers", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--lines", type=int, default=20, help="lines each turn writes")
    parser.add_argument("--rounds", type=int, default=2, help="turns each row takes")
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="SERVE",
        help="another checkout's modal-workspace command, as a row of its own (to find where a "
        "figure moved)",
    )
    args = parser.parse_args()
    if args.compare:
        compare_with(args.compare)
    lift_descriptor_limit()
    print(f"{cpu_model()}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    table(args.pollers, args.lines, args.rounds)


if __name__ == "__main__":
    main()
