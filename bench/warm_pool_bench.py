"""From a create request to the first byte of a command's output on the Modal driver, without the
warm pool (the baseline) and with it (`MODAL_WORKSPACE_WARM_POOL`), in one run.

    python bench/warm_pool_bench.py [--rounds 10] [--start-delay 0 1.5]

Through the real `modal` SDK against the test control plane (tests/modal_control_plane) on
127.0.0.1, with the real agent in each sandbox (under bubblewrap where it works): what the pool
saves there is the container's start and the agent's (a process, its imports, its socket).
The control plane starts a container at once; `--start-delay` adds rows where each container
takes that long to start, standing in for Modal's own (a peer benchmark measured 1.72 s to a
first command on Modal sandboxes), so the rows say what the pool saves at a given start time.
Each round: a create, then `echo hi` until its output arrives, timed as a whole, in a process
that has its app, image and Volume already (one create before the rounds); with the pool, each
round waits for the refill first, as a create arriving after a pause would find it.
Calls per journey are counted too (tests/test_warm_pool.py holds the same figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agent_stack import cpu_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from modal_control_plane import ControlPlane
from modal_control_plane.fixtures import reset_modal_client
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings
from modal_workspace_core.surfaces.python_client import Workspaces

IMAGE = "bench-image"
# The calls that carry a channel's bytes, not counted (as in the round-trip tests).
BYTES = {"TaskExecStdinWrite"}


async def journeys(
    plane: ControlPlane, data: Path, pool: int, rounds: int
) -> tuple[list[float], dict[str, int]]:
    settings = load_settings(
        {
            "MODAL_WORKSPACE_DRIVER": "modal",
            "MODAL_WORKSPACE_DATA_ROOT": str(data),
            "MODAL_WORKSPACE_JANITOR_SECONDS": "0",
        }
    )
    driver = ModalDriver(ModalSettings(app_name="bench", default_image_name=IMAGE, warm_pool=pool))
    times: list[float] = []
    calls: dict[str, int] = {}
    async with Workspaces(driver, settings=settings) as wss:
        first = await wss.create()
        await first.exec("true")
        await first.terminate()
        for _ in range(rounds):
            await refilled(driver, pool)
            if driver.pool is not None:
                # No refill while the journey is counted: its calls are not the journey's.
                driver.pool.size = pool - 1
            before = plane.calls()
            start = time.perf_counter()
            ws = await wss.create()
            got = await ws.exec("echo hi")
            times.append(time.perf_counter() - start)
            calls = {k: n for k, n in (plane.calls() - before).items() if k not in BYTES}
            if driver.pool is not None:
                driver.pool.size = pool
                driver.pool.wake()
            assert got.stdout == "hi\n", got
            await ws.terminate()
    await driver.close()
    return times, calls


async def refilled(driver: ModalDriver, size: int) -> None:
    """Once the pool (if any) has `size` sandboxes waiting."""
    while size and (driver.pool is None or driver.pool.waiting() < size):
        await asyncio.sleep(0.05)


def row(label: str, times: list[float], base: float) -> str:
    median = statistics.median(times)
    return (
        f"| {label:<40} | {median * 1000:>9.0f} | {min(times) * 1000:>7.0f} | "
        f"{max(times) * 1000:>7.0f} | {median / base:>5.2f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--start-delay", type=float, nargs="+", default=[0.0, 1.5])
    args = parser.parse_args()
    print(f"{cpu_model()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    print(f"create -> first output byte, {args.rounds} rounds each, milliseconds\n")
    print(f"| {'journey':<40} | {'median':>9} | {'min':>7} | {'max':>7} | ratio |")
    print(f"|{'-' * 42}|{'-' * 11}:|{'-' * 8}:|{'-' * 8}:|{'-' * 6}:|")
    counted: dict[str, dict[str, int]] = {}
    for delay in args.start_delay:
        root = Path(tempfile.mkdtemp(prefix="mcp-", dir="/tmp"))
        plane = ControlPlane(root).start()
        try:
            os.environ.update(plane.sdk_env())
            reset_modal_client()
            plane.publish_image(IMAGE, "im-benchimage000000000")
            plane.start_delay(delay)
            without, counted["without the pool"] = asyncio.run(
                journeys(plane, root / "off", 0, args.rounds)
            )
            with_pool, counted["with the pool (2 waiting)"] = asyncio.run(
                journeys(plane, root / "on", 2, args.rounds)
            )
        finally:
            with contextlib.suppress(Exception):
                reset_modal_client()
            plane.stop()
            shutil.rmtree(root, ignore_errors=True)
        base = statistics.median(without)
        where = f"container start +{delay:g} s"
        print(row(f"without the pool, {where}", without, base))
        print(row(f"with the pool, {where}", with_pool, base))
    print()
    for label, calls in counted.items():
        print(f"{label}: {sum(calls.values())} calls: {dict(sorted(calls.items()))}")


if __name__ == "__main__":
    main()
