"""What the metrics sampler costs the workspace (issue 26): the agent daemon's own CPU time over
`--seconds` with sampling off (the baseline), at the default 2 s and at the shortest 0.5 s, the
three daemons side by side in the same run, each with `--processes` idle commands for the
sampler to scan. Prints a table with the machine; never asserts.

Run with `python bench/metrics_bench.py [--seconds 60] [--processes 20]` inside the project's
virtualenv. `bench/README.md` says what each column measures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agent_stack import cpu_model, daemon
from modal_workspace_core.channel.client import AgentClient

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
WARMUP = 3.0  # the daemons' start and first samples are not counted

MODES = [("off (baseline)", "off"), ("every 2 s (default)", "2"), ("every 0.5 s", "0.5")]
# The bound the issue sets: sampling costs the workspace less than 1 % of a core by default.


def stat_fields(pid: int) -> tuple[str, list[str]]:
    """A process's name and the fields of its stat after it."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    head, rest = stat.rsplit(")", 1)
    return head.split("(", 1)[1], rest.split()


def cpu_seconds(pid: int) -> float:
    """The daemon's CPU time, user and system, with its reaped children's and that of the
    `nvidia-smi` readers it runs (on a machine with GPUs: the sampler's, not the workspace's)."""
    _, fields = stat_fields(pid)
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            name, child = stat_fields(int(entry))
            if int(child[1]) == pid and name == "nvidia-smi":
                ticks += int(child[11]) + int(child[12])
    return ticks / CLOCK_TICKS


async def start_idle(sock: Path, processes: int) -> None:
    client = await AgentClient.connect_unix(sock)
    try:
        for _ in range(processes):
            await client.request("exec.start", {"argv": ["sleep", "3600"]})
    finally:
        await client.close()


async def samples_taken(sock: Path) -> int:
    client = await AgentClient.connect_unix(sock)
    try:
        status, _ = await client.request("metrics.status", {})
        return int(status["last_seq"])
    finally:
        await client.close()


def host_processes() -> int:
    return sum(1 for entry in os.listdir("/proc") if entry.isdigit())


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--processes", type=int, default=20)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        daemons = [stack.enter_context(daemon("--metrics-interval", mode)) for _, mode in MODES]
        for d in daemons:
            await start_idle(d.socket, args.processes)
        await asyncio.sleep(WARMUP)
        before = [(cpu_seconds(d.process.pid), await samples_taken(d.socket)) for d in daemons]
        started = time.monotonic()
        await asyncio.sleep(args.seconds)
        elapsed = time.monotonic() - started
        after = [(cpu_seconds(d.process.pid), await samples_taken(d.socket)) for d in daemons]
        scanned = host_processes()
    print(
        f"{cpu_model()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"{elapsed:.0f} s measured, {args.processes} idle commands per workspace, "
        f"{scanned} processes in /proc (unisolated daemons scan them all)"
    )
    print()
    print("| sampling            | CPU s | % of a core | samples | ms/sample | vs off  | of 1 % |")
    print("|---------------------|------:|------------:|--------:|----------:|--------:|-------:|")
    base = (after[0][0] - before[0][0]) / elapsed * 100
    for (label, _), (cpu0, seq0), (cpu1, seq1) in zip(MODES, before, after, strict=True):
        cpu, samples = cpu1 - cpu0, seq1 - seq0
        share = cpu / elapsed * 100
        per_sample = f"{cpu / samples * 1e3:.2f}" if samples else "-"
        # The sampler's cost: its daemon's share of a core less the baseline's, in the same run,
        # and that as a part of the budget (1 % of a core).
        extra = share - base
        print(
            f"| {label:<19} | {cpu:5.2f} | {share:11.2f} | {samples:7d} | {per_sample:>9} "
            f"| {extra:+7.2f} | {extra:6.0%} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
