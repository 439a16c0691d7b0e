"""A small CUDA load for `bench/gpu_check.py`: half-precision matrix products on the first
visible GPU for the given seconds, so that its utilisation, memory and power move in the
samples. Needs PyTorch alone (not this project): it runs under whichever Python has it.

`python bench/gpu_load.py SECONDS [SIZE]`; prints what it ran on, then what it did.
"""

from __future__ import annotations

import sys
import time

import torch


def main() -> None:
    seconds = float(sys.argv[1])
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
    device = torch.device("cuda")
    a = torch.randn(size, size, device=device, dtype=torch.float16)
    b = torch.randn(size, size, device=device, dtype=torch.float16)
    c = torch.empty(size, size, device=device, dtype=torch.float16)
    name = torch.cuda.get_device_name(device)
    print(f"load: {name}, torch {torch.__version__}, {size}x{size} fp16 products", flush=True)
    done, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        # Queued in tens and waited for, so that the queue stays short and the loop ends on time.
        for _ in range(10):
            torch.mm(a, b, out=c)
        torch.cuda.synchronize()
        done += 10
    elapsed = time.monotonic() - started
    tflops = 2 * size**3 * done / elapsed / 1e12
    print(f"load: {done} products in {elapsed:.1f} s, {tflops:.0f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
