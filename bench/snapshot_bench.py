"""Snapshots on the local driver: a 1 GiB tree snapshotted, forked and resumed through the Python
API (`Workspaces`, the embedded local driver), against `cp -a` of the same tree (the baseline)
measured in the same run.

    python bench/snapshot_bench.py [--size 1G] [--files 1000] [--rounds 3]

The tree is `--files` files of random bytes (incompressible, so no file system can shortcut
them) in ten directories. Each row is the median of `--rounds` runs, the baseline's rounds
interleaved with the product's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agent_stack import cpu_model
from modal_workspace_core import _core
from modal_workspace_core.config import load_settings
from modal_workspace_core.runtime.call import PROGRESS
from modal_workspace_core.surfaces.python_client import Workspaces


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1:].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(text)


def core_copy(source: Path, scratch: Path) -> float:
    """The copy a snapshot makes now: the core's fd walk (`_core.copy_tree`), no workspace."""
    target = scratch / "core"
    target.mkdir()
    started = time.perf_counter()
    _core.copy_tree(
        str(source), str(target), display="/workspace", max_bytes=1 << 62, max_entries=1 << 30
    )
    seconds = time.perf_counter() - started
    _core.remove_tree(str(target), display="/workspace")
    return seconds


def cp_baseline(source: Path, scratch: Path) -> float:
    target = scratch / "copy"
    started = time.perf_counter()
    subprocess.run(["cp", "-a", "--reflink=auto", f"{source}/.", str(target)], check=True)
    seconds = time.perf_counter() - started
    shutil.rmtree(target)
    return seconds


async def product(data_root: Path, size: int, files: int, rounds: int) -> dict[str, list[float]]:
    env = {**os.environ, "MODAL_WORKSPACE_DATA_ROOT": str(data_root)}
    times: dict[str, list[float]] = {
        "cp": [],
        "core": [],
        "snapshot": [],
        "fork": [],
        "resume": [],
    }
    reports: list[float] = []

    async def report(done: float, line: str) -> None:
        reports.append(done)

    async with Workspaces(settings=load_settings(env)) as wss:
        ws = await wss.create()
        host = Path(ws.info.root) if ws.info.root != "/workspace" else None
        # The tree is written by a command in the workspace, as an agent's build would.
        made = await ws.exec(
            f"python3 -c 'import os\nfor i in range({files}):\n"
            f' os.makedirs("t/d%d" % (i % 10), exist_ok=True)\n'
            f' open("t/d%d/f%d.bin" % (i % 10, i), "wb").write(os.urandom({size // files}))\'',
            timeout_seconds=3600,
        )
        assert made.returncode == 0, made.stderr
        source = _files_of(data_root, ws.id, host)
        for _ in range(rounds):
            with tempfile.TemporaryDirectory(dir=data_root) as scratch:
                times["cp"].append(cp_baseline(source, Path(scratch)))
                times["core"].append(core_copy(source, Path(scratch)))
            token = PROGRESS.set(report)
            started = time.perf_counter()
            snap = await wss.call("workspace_snapshot", workspace_id=ws.id)
            times["snapshot"].append(time.perf_counter() - started)
            PROGRESS.reset(token)
            started = time.perf_counter()
            fork = await wss.call(
                "workspace_fork", workspace_id=ws.id, snapshot_id=snap.snapshot_id
            )
            times["fork"].append(time.perf_counter() - started)
            await wss.call("workspace_terminate", workspace_id=fork.workspace_id, purge=True)
            started = time.perf_counter()
            await wss.call("workspace_resume", workspace_id=ws.id, snapshot_id=snap.snapshot_id)
            times["resume"].append(time.perf_counter() - started)
            await wss.call(
                "workspace_snapshot_delete", workspace_id=ws.id, snapshot_id=snap.snapshot_id
            )
        await wss.call("workspace_terminate", workspace_id=ws.id, purge=True)
    print(f"progress reports during the snapshots: {len(reports)}", file=sys.stderr)
    return times


def _files_of(data_root: Path, workspace_id: str, host: Path | None) -> Path:
    if host is not None:
        return host / "t"
    own_disk = data_root / workspace_id / "disk" / "workspace" / "t"
    return own_disk if own_disk.is_dir() else data_root / workspace_id / "workspace" / "t"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1G")
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    size = parse_size(args.size)
    with tempfile.TemporaryDirectory(prefix="mwc-snapbench-") as tmp:
        times = asyncio.run(product(Path(tmp), size, args.files, args.rounds))
    base = statistics.median(times["cp"])
    print(f"## Snapshots, local driver — {os.cpu_count()} cores, {cpu_model()}")
    print()
    print(
        f"| {args.size} in {args.files} files ({args.rounds} rounds) | median s | MB/s | ÷ cp -a |"
    )
    print("|---------------------------------------|---------:|-----:|--------:|")
    names = {
        "cp": "baseline: `cp -a --reflink=auto` of the tree",
        "core": "`_core.copy_tree` of the tree (fds, no link)",
        "snapshot": "workspace_snapshot (files, home, exec logs)",
        "fork": "workspace_fork of that snapshot",
        "resume": "workspace_resume from it",
    }
    for key, name in names.items():
        seconds = statistics.median(times[key])
        rate = size / seconds / 1e6
        print(f"| {name:<45} | {seconds:8.2f} | {rate:4.0f} | {seconds / base:6.2f}x |")


if __name__ == "__main__":
    main()
