"""The GPU check (issue 26): on a machine with an NVIDIA GPU, an agent daemon samples it every
`--interval` seconds for `--seconds` under a small CUDA load (when a PyTorch with CUDA is found
or, with `--install-torch DIR`, installed; else `nvidia-smi` alone), and this prints each
sample's GPUs as it comes, the sampler's own CPU cost, and a one-line verdict. Exits 0 when a
sample had a GPU with its utilisation and memory and no line of `nvidia-smi` failed to parse,
1 when not, 2 without an `nvidia-smi` on the PATH.

`bench/gpu_check.sh` builds the project and runs this (bench/README.md); from a checkout's
virtualenv: `python bench/gpu_check.py [--seconds 30] [--interval 1] [--no-torch]`.

The daemon is started directly and unisolated, as the metrics bench does: a sandboxed daemon's
PATH holds only system directories, and this must run on any machine without root.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_torch
from agent_stack import daemon, temp_dir
from metrics_bench import cpu_seconds
from modal_workspace_core.channel.client import AgentClient

MIB = 1 << 20


def mib(value: Any) -> str:
    return "?" if value is None else f"{value // MIB}"


def num(value: Any) -> str:
    return "?" if value is None else f"{value:g}"


def gpu_text(gpu: dict[str, Any]) -> str:
    processes = ", ".join(
        f"{p.get('name')}[{p.get('pid')}] {mib(p.get('memory_used_bytes'))} MiB"
        for p in gpu.get("processes") or []
    )
    return (
        f"gpu {gpu.get('index')} {gpu.get('name')}: util {num(gpu.get('utilization_percent'))}%, "
        f"mem {mib(gpu.get('memory_used_bytes'))}/{mib(gpu.get('memory_total_bytes'))} MiB, "
        f"{num(gpu.get('temperature_celsius'))} C, {num(gpu.get('power_watts'))} W, "
        f"processes: {processes or 'none'}"
    )


def sample_text(sample: dict[str, Any], at: float) -> str:
    head = f"#{sample.get('seq', '?'):<4} +{at:5.1f} s  "
    if "gpu_garbage_lines" not in sample:
        return f"{head}no GPU reader (the agent runs no nvidia-smi)"
    garbage = sample["gpu_garbage_lines"]
    tail = f"  [{garbage} garbage lines]" if garbage else ""
    gpus = sample.get("gpus")
    if not gpus:
        return f"{head}no GPU read yet{tail}"
    # One line a GPU, the second and later under the first.
    return head + ("\n" + " " * len(head)).join(gpu_text(g) for g in gpus) + tail


def complete(gpu: dict[str, Any]) -> bool:
    """A GPU with its utilisation and memory as numbers (the driver's `[N/A]` is null)."""
    fields = ("utilization_percent", "memory_used_bytes", "memory_total_bytes")
    return all(isinstance(gpu.get(f), int | float) for f in fields)


def busy(sample: dict[str, Any]) -> bool:
    return any((g.get("utilization_percent") or 0) > 0 for g in sample.get("gpus") or [])


def verdict(samples: list[dict[str, Any]]) -> tuple[bool, str]:
    """Whether the GPU fields were there, and a sentence saying what was seen."""
    if not samples:
        return False, "no metrics sample came from the agent"
    read = [s for s in samples if "gpu_garbage_lines" in s]
    if not read:
        return False, (
            f"no GPU field in {len(samples)} samples: the agent ran no nvidia-smi (it runs only "
            "one on its PATH that no one but root or its user can write)"
        )
    garbage = max(s["gpu_garbage_lines"] for s in read)
    with_gpus = [s for s in read if any(complete(g) for g in s.get("gpus") or [])]
    if not with_gpus:
        listed = sum(1 for s in read if s.get("gpus"))
        return False, (
            f"no GPU with utilisation and memory in {len(samples)} samples"
            + (f" ({listed} listed GPUs without them)" if listed else "")
            + f"; {garbage} lines of nvidia-smi did not parse"
        )
    if garbage:
        return False, f"gpu_garbage_lines grew to {garbage}: lines of nvidia-smi did not parse"
    peak = max(g["utilization_percent"] for s in with_gpus for g in s["gpus"] if complete(g))
    return True, (
        f"{len(with_gpus)} of {len(samples)} samples had GPUs with utilisation and memory "
        f"(peak utilisation {peak:g}%), no garbage lines"
    )


async def read_samples(
    sock: Path, seconds: float, shown: Callable[[dict[str, Any]], None]
) -> list[dict[str, Any]]:
    """Every metrics sample of the daemon's stream, from its first, until `seconds` have passed:
    read through the agent's channel as a gateway reads it."""
    client = await AgentClient.connect_unix(sock)
    try:
        status, _ = await client.request("metrics.status", {})
        stream, cursor, samples = status["stream_id"], 0, []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (left := deadline - loop.time()) > 0:
            page = await client.read_events(stream, cursor, wait_seconds=left)
            for event in page.events:
                if event.get("type") == "metrics":
                    samples.append(event)
                    shown(event)
            cursor = page.next_cursor
            if page.closed:
                break
        return samples
    finally:
        await client.close()


def stop_on_signal(signum: int, _: FrameType | None) -> None:
    # Unwinds through the `with` blocks: the daemon and the load are ended, the temp dir removed.
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="the sampled window")
    parser.add_argument("--interval", type=float, default=1.0, help="the sampler (0.5-60 s)")
    parser.add_argument("--load-seconds", type=float, default=20.0, help="the CUDA load's time")
    parser.add_argument("--no-torch", action="store_true", help="no CUDA load: nvidia-smi alone")
    parser.add_argument("--torch-python", help="the Python whose PyTorch runs the load")
    parser.add_argument("--install-torch", type=Path, metavar="DIR", help="pip installs it here")
    parser.add_argument("--torch-timeout", type=float, default=600.0, help="pip's bound, in s")
    args = parser.parse_args()
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop_on_signal)

    smi = shutil.which("nvidia-smi")
    if smi is None:
        print("gpu_check: no nvidia-smi on the PATH: this needs an NVIDIA GPU and its driver")
        return 2
    print(f"nvidia-smi: {smi}", flush=True)
    torch = None
    if args.no_torch:
        print("torch: not asked for (--no-torch): nvidia-smi alone", flush=True)
    else:
        torch = gpu_torch.find(args.torch_python, args.install_torch, args.torch_timeout)
        if torch is None:
            print("torch: none, so no CUDA load: nvidia-smi alone", flush=True)

    with contextlib.ExitStack() as stack:
        base = stack.enter_context(temp_dir())
        d = stack.enter_context(daemon("--metrics-interval", f"{args.interval:g}"))
        if torch is not None:
            stack.enter_context(gpu_torch.load(torch, args.load_seconds, base / "load.log"))
        print(
            f"sampling every {args.interval:g} s for {args.seconds:g} s "
            f"(daemon pid {d.process.pid}{', under the CUDA load' if torch else ''})",
            flush=True,
        )
        started = time.monotonic()
        cpu_before = cpu_seconds(d.process.pid)

        def shown(sample: dict[str, Any]) -> None:
            print(sample_text(sample, time.monotonic() - started), flush=True)

        samples = asyncio.run(read_samples(d.socket, args.seconds, shown))
        cpu = cpu_seconds(d.process.pid) - cpu_before
        elapsed = time.monotonic() - started
        if torch is not None:
            log = (base / "load.log").read_text(errors="replace").strip().splitlines()
            print("\n".join(log[-5:]) or "load: said nothing", flush=True)

    per_sample = f", {cpu / len(samples) * 1e3:.1f} ms a sample" if samples else ""
    print(
        f"sampler: {cpu:.2f} CPU s in {elapsed:.1f} s = {cpu / elapsed * 100:.2f} % of a core "
        f"(the daemon and its nvidia-smi readers; {len(samples)} samples{per_sample})"
    )
    ok, why = verdict(samples)
    if ok and torch is not None and not any(busy(s) for s in samples):
        # Not a failure of the fields, but worth a look: the load should have shown.
        print("note: the CUDA load ran, yet no sample showed a GPU's utilisation above 0 %")
    print(f"{'OK' if ok else 'FAIL'}: {why}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
