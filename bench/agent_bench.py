"""The agent through the whole stack: wake-up latency, throughput and memory (issue 3), each
against a baseline measured in the same run. Prints tables with the machine; never asserts.

Run with `make bench`, or `python bench/agent_bench.py [--size 1G] [--lines 500]` inside the
project's virtualenv. `bench/README.md` says what each row measures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agent_stack import (
    Http,
    baseline_rest,
    baseline_unix,
    cpu_model,
    daemon,
    gateway,
    proc_memory,
)
from modal_workspace_core.channel.client import AgentClient

# A process that writes its clock (CLOCK_MONOTONIC, shared by all processes) as one line per
# write, `n` times, `pause` seconds apart, after `delay` seconds for the reader to be waiting.
STAMPER = """
import os, sys, time
n, pause, delay = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
time.sleep(delay)
for _ in range(n):
    os.write(1, b"%d\\n" % time.monotonic_ns())
    time.sleep(pause)
"""
PAUSE = 0.005
DELAY = 1.0
WARMUP = 5  # the first lines also pay for first-use costs (imports, caches): not counted


def stamper(lines: int) -> list[str]:
    return [sys.executable, "-c", STAMPER, str(lines), str(PAUSE), str(DELAY)]


def stamps(text: str, now: int) -> list[float]:
    return [(now - int(s)) / 1e3 for s in text.split()]


# --- (a) wake-up latency --------------------------------------------------------------------


async def agent_latency(sock: Path, lines: int) -> list[float]:
    client = await AgentClient.connect_unix(sock)
    try:
        status, _ = await client.request("exec.start", {"argv": stamper(lines)})
        exec_id, cursor, samples = status["exec_id"], 0, []
        while True:
            page = await client.read_events(exec_id, cursor, wait_seconds=20)
            now = time.monotonic_ns()
            for event in page.events:
                if event["type"] == "stdout":
                    samples += stamps(event["data"], now)
            cursor = page.next_cursor
            if page.closed and not page.has_more:
                return samples
    finally:
        await client.close()


async def baseline_unix_latency(sock: Path) -> list[float]:
    reader, writer = await asyncio.open_unix_connection(str(sock))
    samples, partial = [], b""
    while data := await reader.read(65536):
        now = time.monotonic_ns()
        partial += data
        complete, _, partial = partial.rpartition(b"\n")
        samples += stamps(complete.decode(), now)
    writer.close()
    return samples


def gateway_latency(port: int, lines: int) -> list[float]:
    api = Http(port)
    try:
        ws = api.call("POST", "/api/workspaces", {})["workspace_id"]
        command = "exec " + shlex.join(stamper(lines))
        started = api.call("POST", f"/api/workspaces/{ws}/realtime-execs", {"command": command})
        events = f"/api/workspaces/{ws}/realtime-execs/{started['exec_id']}/events"
        cursor, samples = 0, []
        while True:
            page = api.call("GET", f"{events}?cursor={cursor}&wait_seconds=20")
            now = time.monotonic_ns()
            for event in page["events"]:
                if event["type"] == "stdout":
                    samples += stamps(event["data"], now)
            cursor = page["next_cursor"]
            if page["done"]:
                return samples
    finally:
        api.close()


def baseline_rest_latency(port: int) -> list[float]:
    api = Http(port)
    try:
        cursor, samples = 0, []
        while True:
            page = api.call("GET", f"/events?cursor={cursor}&wait_seconds=20")
            now = time.monotonic_ns()
            for event in page["events"]:
                samples += stamps(event["data"], now)
            cursor = page["next_cursor"]
            if page["done"] and not page["events"]:
                return samples
    finally:
        api.close()


LATENCY_ROWS = {
    "channel": "agent daemon → channel → AgentClient.read_events (cursor)",
    "unix": "baseline: asyncio server piping the child, unix socket",
    "rest": "REST: gateway (FastAPI/uvicorn, local driver) → HTTP long-poll",
    "fastapi": "baseline: FastAPI/uvicorn server piping the child → long-poll",
    "stdlib": "baseline: http.server (stdlib) piping the child → long-poll",
}


def latency_table(lines: int, rounds: int) -> None:
    """The product and the baselines take turns, `rounds` times `lines` each (in the reverse
    order every other round), so that a change in the machine's load during the run falls on
    all of them alike."""
    argv = stamper(lines)

    def channel() -> list[float]:
        with daemon() as d:
            return asyncio.run(agent_latency(d.socket, lines))

    def asyncio_pipe() -> list[float]:
        with baseline_unix(argv) as sock:
            return asyncio.run(baseline_unix_latency(sock))

    def rest() -> list[float]:
        with gateway() as port:
            return gateway_latency(port, lines)

    def rest_pipe(mode: str) -> Callable[[], list[float]]:
        def run() -> list[float]:
            with baseline_rest(argv, mode) as port:
                return baseline_rest_latency(port)

        return run

    # How one turn of each row runs, and the product row it is compared with.
    runs: dict[str, tuple[Callable[[], list[float]], str | None]] = {
        "channel": (channel, None),
        "unix": (asyncio_pipe, "channel"),
        "rest": (rest, None),
        "fastapi": (rest_pipe("rest"), "rest"),
        "stdlib": (rest_pipe("stdlib"), "rest"),
    }
    samples: dict[str, list[float]] = {key: [] for key in runs}
    for turn in range(rounds):
        for key in runs if turn % 2 == 0 else reversed(runs):
            samples[key] += runs[key][0]()[WARMUP:]

    def stats(key: str) -> tuple[float, float, int]:
        kept = sorted(samples[key])
        return statistics.median(kept), kept[min(len(kept) - 1, int(len(kept) * 0.99))], len(kept)

    width = 62
    print(
        f"| {'process writes a line → waiting client has it':<{width}} "
        "| median µs |  p99 µs | lines | product ÷ this |"
    )
    print(f"|{'-' * (width + 2)}|----------:|--------:|------:|---------------:|")
    for key, (_, product) in runs.items():
        median, p99, n = stats(key)
        name = LATENCY_ROWS[key]
        ratio = f"{stats(product)[0] / median:.2f}x" if product else "—"
        print(f"| {name:<{width}} | {median:>9.0f} | {p99:>7.0f} | {n:>5} | {ratio:>14} |")


# --- (b) throughput -------------------------------------------------------------------------


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1:].upper() in units:
        return int(float(text[:-1]) * units[text[-1:].upper()])
    return int(text)


def base64_bytes(size: int) -> int:
    """What `base64` prints for `size` bytes: 4 characters per 3 bytes, a newline every 76."""
    encoded = 4 * -(-size // 3)
    return encoded + -(-encoded // 76)


def timed_shell(command: str) -> float:
    started = time.perf_counter()
    subprocess.run(["bash", "-c", command], check=True)
    return time.perf_counter() - started


async def agent_throughput(sock: Path, size: int, max_bytes: int) -> tuple[int, float, int]:
    """(stdout bytes received, seconds from exec.start to done, bytes reported dropped)."""
    client = await AgentClient.connect_unix(sock)
    try:
        started = time.perf_counter()
        command = f"head -c {size} /dev/zero | base64"
        status, _ = await client.request("exec.start", {"command": command})
        exec_id, cursor, received, dropped = status["exec_id"], 0, 0, 0
        while True:
            page = await client.read_events(
                exec_id, cursor, max_events=10_000, max_bytes=max_bytes, wait_seconds=20
            )
            if page.cursor_expired:
                dropped += page.dropped_bytes
            for event in page.events:
                if event["type"] == "stdout":
                    received += len(event["data"])
            cursor = page.next_cursor
            if page.closed and not page.has_more:
                return received, time.perf_counter() - started, dropped
    finally:
        await client.close()


def throughput_table(size: int, label: str) -> None:
    produced = base64_bytes(size)
    source = f"head -c {size} /dev/zero | base64"
    cat_secs = timed_shell(f"{source} | cat > /dev/null")
    alone_secs = timed_shell(f"{source} > /dev/null")
    cat_rate = produced / cat_secs / 1e6
    title = f"`head -c {label} /dev/zero | base64` → reader"
    print(f"| {title:<47} |         bytes |       dropped |     s |  MB/s | of cat |")
    print(f"|{'-' * 49}|--------------:|--------------:|------:|------:|-------:|")

    def row(name: str, received: int, secs: float, dropped: int) -> None:
        rate = received / secs / 1e6
        print(
            f"| {name:<47} | {received:>13,} | {dropped:>13,} | {secs:>5.2f} | {rate:>5.0f} "
            f"| {rate / cat_rate:>5.0%} |"
        )

    row("`base64 > /dev/null` (the producer alone)", produced, alone_secs, 0)
    row("`base64 | cat > /dev/null` (the baseline)", produced, cat_secs, 0)
    for max_bytes, name in ((65536, "64 KiB"), (1 << 20, "1 MiB")):
        with daemon() as d:
            received, secs, dropped = asyncio.run(agent_throughput(d.socket, size, max_bytes))
        row(f"agent → AgentClient.read_events, {name} pages", received, secs, dropped)


# --- (c) memory -----------------------------------------------------------------------------


async def start_execs(sock: Path, argv: list[str], count: int, until: set[str]) -> list[str]:
    """Starts `count` execs of `argv` and waits until every one is in a state of `until`."""
    client = await AgentClient.connect_unix(sock)
    try:
        started = await asyncio.gather(
            *(client.request("exec.start", {"argv": argv}) for _ in range(count))
        )
        ids = [status["exec_id"] for status, _ in started]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            listed, _ = await client.request("exec.list")
            if all(s["state"] in until for s in listed["execs"]):
                return ids
            await asyncio.sleep(0.2)
        raise RuntimeError(f"the execs did not reach {until} in time")
    finally:
        await client.close()


async def cancel_execs(sock: Path, ids: list[str]) -> None:
    client = await AgentClient.connect_unix(sock)
    try:
        args = [{"exec_id": i, "grace_seconds": 0} for i in ids]
        await asyncio.gather(*(client.request("exec.cancel", a) for a in args))
    finally:
        await client.close()


async def follow(sock: Path, ids: list[str]) -> None:
    """The gateway side of (c), in its own process: one long-poll per exec, all waiting; prints
    its memory before and while following, then waits for its stdin to close."""
    client = await AgentClient.connect_unix(sock, max_streams=len(ids) + 64)
    before = proc_memory(os.getpid())
    waiting = asyncio.Semaphore(0)

    async def one(exec_id: str) -> None:
        page = await client.read_events(exec_id, 0, wait_seconds=20)
        waiting.release()
        await client.read_events(exec_id, page.next_cursor, wait_seconds=600)

    tasks = [asyncio.create_task(one(i)) for i in ids]
    for _ in ids:
        await waiting.acquire()
    await asyncio.sleep(0.5)
    print(json.dumps({"before": before, "following": proc_memory(os.getpid())}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    for task in tasks:
        task.cancel()
    await client.close()


def memory_table(count: int) -> None:
    rows: list[tuple[str, tuple[int, int], tuple[int, int] | None]] = []
    with daemon() as d:
        idle = d.memory()
        asyncio.run(start_execs(d.socket, ["true"], count, {"finished"}))
        rows += [("daemon, idle (the baseline)", idle, None)]
        rows += [(f"daemon, {count} finished execs (`true`)", d.memory(), idle)]
    with daemon() as d:
        idle = d.memory()
        ids = asyncio.run(start_execs(d.socket, ["sleep", "1000"], count, {"running"}))
        try:
            rows += [(f"daemon, {count} running execs (`sleep 1000`)", d.memory(), idle)]
            argv = [sys.executable, __file__, "follow", str(d.socket)]
            with subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
            ) as gw:
                assert gw.stdin is not None and gw.stdout is not None
                gw.stdin.write(json.dumps(ids) + "\n")
                gw.stdin.flush()
                seen = json.loads(gw.stdout.readline())
                rows += [(f"daemon, a gateway following the {count}", d.memory(), idle)]
                gw.stdin.close()
                gw.wait(60)
            before = tuple(seen["before"])
            rows += [("gateway (AgentClient), connected, following none", before, None)]
            rows += [
                (
                    f"gateway following the {count} (one long-poll each)",
                    tuple(seen["following"]),
                    before,
                )
            ]
        finally:
            asyncio.run(cancel_execs(d.socket, ids))

    print(f"| {'memory (/proc/PID/status)':<52} | VmRSS MiB | VmHWM MiB | RSS per exec KiB |")
    print(f"|{'-' * 54}|----------:|----------:|-----------------:|")
    for name, (rss, hwm), against in rows:
        per = f"{(rss - against[0]) / count:.1f}" if against else "—"
        print(f"| {name:<52} | {rss / 1024:>9.1f} | {hwm / 1024:>9.1f} | {per:>16} |")


# --- main -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1G", help="bytes of /dev/zero for (b), e.g. 256M")
    parser.add_argument("--lines", type=int, default=500, help="lines counted per row of (a)")
    parser.add_argument("--rounds", type=int, default=2, help="turns each row of (a) takes")
    parser.add_argument("--execs", type=int, default=1000, help="execs for (c)")
    parser.add_argument("--only", choices=["latency", "throughput", "memory"])
    args = parser.parse_args()
    print(
        f"\n## Agent through the whole stack — {os.cpu_count()} cores, {cpu_model()}, "
        f"Python {platform.python_version()}\n"
    )
    if args.only in (None, "latency"):
        latency_table(args.lines // args.rounds + WARMUP, args.rounds)
        print()
    if args.only in (None, "throughput"):
        throughput_table(parse_size(args.size), args.size)
        print()
    if args.only in (None, "memory"):
        memory_table(args.execs)


if __name__ == "__main__":
    if sys.argv[1:2] == ["follow"]:
        asyncio.run(follow(Path(sys.argv[2]), json.loads(sys.stdin.readline())))
    else:
        main()
