"""The GPU check (`bench/gpu_check.py`) on a machine without a GPU: a fake `nvidia-smi`
(tests/fake_nvidia_smi.py, a shell script) is put first on the check's PATH, and so on its
daemon's, and the check runs for a few seconds with `--no-torch` (no CUDA load, no pip). It
prints the fake's GPUs and exits 0; with only garbage from the fake, or good lines and garbage,
it exits 1 and says why; with no `nvidia-smi` at all, 2. With a fake `torch` module on its
PYTHONPATH it finds it and runs `bench/gpu_load.py` beside the sampler. `bench/gpu_check.sh`,
which builds the project first, is not run here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_nvidia_smi import gpu_line, install, put

CHECK = Path(__file__).resolve().parents[1] / "bench" / "gpu_check.py"
APPS = "GPU-00000000, 4242, /usr/bin/python3, 512\n"


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    install(tmp_path / "fake-tools")
    put(tmp_path / "fake-tools", "apps", APPS)
    return tmp_path / "fake-tools"


# A stand-in for PyTorch that "sees a GPU": what the check's probe and bench/gpu_load.py call.
FAKE_TORCH = """
import time
__version__ = "0-fake"
float16 = "float16"
def device(name): return name
def randn(*shape, **where): return None
def empty(*shape, **where): return None
def mm(a, b, out=None): return None
class cuda:
    is_available = staticmethod(lambda: True)
    get_device_name = staticmethod(lambda device=None: "Fake GPU")
    synchronize = staticmethod(lambda: time.sleep(0.01))
"""


def check(path: str, *options: str, **env: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(CHECK), "--seconds", "2.5", "--interval", "0.5", *options]
    env = {**os.environ, "PATH": path, **env}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def with_fake(tools: Path) -> str:
    return f"{tools}:{os.environ.get('PATH', '/usr/bin:/bin')}"


def test_gpus_from_the_fake_are_printed_and_the_check_passes(tools: Path) -> None:
    put(tools, "gpus", gpu_line(0) + gpu_line(1))
    done = check(with_fake(tools), "--no-torch")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "torch: not asked for" in out
    assert "gpu 0 NVIDIA Fake: util 0%, mem 1024/81920 MiB, 40 C, 70.3 W" in out
    assert "processes: python3[4242] 512 MiB" in out
    assert "gpu 1 NVIDIA Fake: util 10%" in out
    assert "sampler: " in out and "% of a core" in out
    assert out.strip().splitlines()[-1].startswith("OK: "), out


def test_garbage_alone_fails_saying_no_gpu_was_read(tools: Path) -> None:
    put(tools, "gpus", "what is this\n")
    done = check(with_fake(tools), "--no-torch")
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("FAIL: no GPU with utilisation and memory"), last


def test_garbage_beside_good_lines_fails_naming_the_garbage(tools: Path) -> None:
    put(tools, "gpus", gpu_line(0) + "what is this\n")
    done = check(with_fake(tools), "--no-torch")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "gpu 0 NVIDIA Fake" in done.stdout
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("FAIL: gpu_garbage_lines grew to "), last


def test_without_nvidia_smi_it_exits_2(tmp_path: Path) -> None:
    done = check(str(tmp_path), "--no-torch")
    assert done.returncode == 2
    assert "no nvidia-smi on the PATH" in done.stdout


def test_a_pytorch_that_sees_a_gpu_runs_the_load_beside_the_sampler(
    tools: Path, tmp_path: Path
) -> None:
    """A fake `torch` module on the check's PYTHONPATH: found by the probe, the load runs as the
    check's child for its seconds and what it printed comes at the end."""
    (tmp_path / "site" / "torch").mkdir(parents=True)
    (tmp_path / "site" / "torch" / "__init__.py").write_text(FAKE_TORCH)
    put(tools, "gpus", gpu_line(0))
    pythonpath = os.pathsep.join(
        filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")])
    )
    done = check(with_fake(tools), "--load-seconds", "1", PYTHONPATH=pythonpath)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "has PyTorch with CUDA" in out and "under the CUDA load" in out
    assert "load: Fake GPU, torch 0-fake, 8192x8192 fp16 products" in out
    assert "TFLOP/s" in out
