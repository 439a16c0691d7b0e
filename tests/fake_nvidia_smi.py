"""A fake `nvidia-smi` for tests on machines without a GPU: a shell script that prints, at each
`-lms` interval, the file beside it named after its query (`gpus` for `--query-gpu`, `apps` for
`--query-compute-apps`), which a test writes and replaces as it goes."""

from __future__ import annotations

from pathlib import Path

FAKE_NVIDIA_SMI = r"""#!/bin/sh
# A fake nvidia-smi for tests: prints the file named after its query at each -lms interval.
dir=$(dirname "$0")
case "$1" in --query-gpu=*) f="$dir/gpus" ;; *) f="$dir/apps" ;; esac
ms=$4
pause=$((ms / 1000)).$(printf %03d $((ms % 1000)))
while :; do
  cat "$f" 2>/dev/null
  sleep "$pause"
done
"""


def install(tools: Path) -> Path:
    """Writes the fake into `tools`, a new directory that only its owner may write (the agent
    runs no `nvidia-smi` that others could have replaced), and returns its path."""
    tools.mkdir(mode=0o755)
    program = tools / "nvidia-smi"
    program.write_text(FAKE_NVIDIA_SMI)
    program.chmod(0o755)
    return program


def gpu_line(index: int) -> str:
    return f"{index}, GPU-{index:08d}, NVIDIA Fake, {index * 10}, 1024, 81920, 40, 70.25\n"


def put(directory: Path, name: str, text: str) -> None:
    # Replaced whole, so that the fake never prints half a file.
    tmp = directory / f"{name}.tmp"
    tmp.write_text(text)
    tmp.replace(directory / name)
