"""Where `bench/gpu_check.py` finds PyTorch for its CUDA load: a Python that imports it and sees
a GPU (the one named, else this one, else `python3` on the PATH: a GPU machine's own PyTorch is
often there), else, when asked, one that pip installs into a directory of the check's own
within a bounded time. When there is none it says why, and the check samples `nvidia-smi` alone.

The load runs as a child of the check, never of the agent: the daemon's CPU time counts its
reaped children's, and the load's would then pass for the sampler's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

LOAD = Path(__file__).resolve().parent / "gpu_load.py"
# Importing PyTorch and starting CUDA takes seconds, a minute on a cold disk.
PROBE_SECONDS = 180.0
# Exits 3 when PyTorch imports but sees no GPU (a build without CUDA).
PROBE = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)"


@dataclass
class Torch:
    """A Python whose PyTorch sees a GPU, and what its environment needs for that."""

    python: str
    env: dict[str, str] = field(default_factory=dict)


def probe(python: str, env: dict[str, str]) -> str | None:
    """None when `python` imports a PyTorch that sees a GPU; else why not."""
    try:
        done = subprocess.run(
            [python, "-c", PROBE],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=PROBE_SECONDS,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{python}: {e}"
    if done.returncode == 0:
        return None
    if done.returncode == 3:
        return f"{python}: its PyTorch sees no GPU"
    last = (done.stderr.strip().splitlines() or ["exit status " + str(done.returncode)])[-1]
    return f"{python}: {last}"


def candidates(named: str | None) -> list[str]:
    if named:
        return [named]
    found = [sys.executable]
    system = shutil.which("python3")
    if system and os.path.realpath(system) != os.path.realpath(sys.executable):
        found.append(system)
    return found


def install(target: Path, seconds: float) -> str | None:
    """pip installs PyTorch into `target` within `seconds`; None when it did, else why not. A
    machine without a network fails in about half a minute (one retry of 15 s)."""
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    argv += ["--no-input", "--timeout", "15", "--retries", "1", "--target", str(target), "torch"]
    # A session of its own, so that a timeout ends pip and whatever it started.
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return f"pip did not install torch within {seconds:g} s"
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise
    if process.returncode != 0:
        lines = output.strip().splitlines() or [f"exit status {process.returncode}"]
        return f"pip install torch failed: {lines[-1]}"
    return None


def find(named: str | None, target: Path | None, install_seconds: float) -> Torch | None:
    """The Python to run the load with, or None; prints what it tried."""
    for python in candidates(named):
        reason = probe(python, {})
        if reason is None:
            print(f"torch: {python} has PyTorch with CUDA", flush=True)
            return Torch(python)
        print(f"torch: not {reason}", flush=True)
    if target is None:
        print("torch: none found (--install-torch DIR installs it)", flush=True)
        return None
    print(
        f"torch: installing it with pip into {target} (at most {install_seconds:g} s)", flush=True
    )
    reason = install(target, install_seconds)
    if reason is None:
        env = {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")]))
        }
        reason = probe(sys.executable, env)
        if reason is None:
            print("torch: installed", flush=True)
            return Torch(sys.executable, env)
    print(f"torch: {reason}", flush=True)
    return None


@contextlib.contextmanager
def load(torch: Torch, seconds: float, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The CUDA load for `seconds`, its output in `log`; ended on the way out."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [torch.python, str(LOAD), f"{seconds:g}"],
            env={**os.environ, **torch.env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
