"""The wheel's builder stage for real, on Linux: `build_wheel.sh`, the script the image's builder
stage runs, run against a copy of exactly the build context the image gets, makes a Linux wheel
that installs and imports, with the workspace agent's command in it."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from modal_workspace_core.drivers.modal.wheel_stage import BUILD_SCRIPT, RUST_TOOLCHAIN, Checkout

CHECKOUT = Path(__file__).resolve().parents[1]


def _missing() -> str | None:
    if not sys.platform.startswith("linux"):
        return "the builder stage runs on Linux"
    if shutil.which("cargo") is None:
        return "no cargo on PATH"
    done = subprocess.run([sys.executable, "-m", "maturin", "--version"], capture_output=True)
    return None if done.returncode == 0 else "maturin is not installed in this interpreter"


def _build_dir() -> Path:
    # Kept between runs, so only what changed is compiled again (a first run takes minutes).
    target = os.environ.get("CARGO_TARGET_DIR") or str(CHECKOUT / "target")
    return Path(target) / "wheel-stage-test"


@pytest.mark.skipif(_missing() is not None, reason=str(_missing()))
def test_the_builder_stage_makes_an_importable_wheel_from_the_build_context_alone(
    tmp_path: Path,
) -> None:
    source = _build_dir() / "src"
    shutil.rmtree(source, ignore_errors=True)
    for name in Checkout(CHECKOUT).files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(CHECKOUT / name, source / name)
    out = tmp_path / "wheels"
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "CARGO_TARGET_DIR": str(_build_dir() / "target"),
        # No test needs the network: the crates come from this machine's cargo cache.
        "CARGO_NET_OFFLINE": "true",
    }

    done = subprocess.run(
        ["sh", str(source / BUILD_SCRIPT), str(source), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )

    assert done.returncode == 0, done.stderr[-4000:]
    (wheel,) = out.glob("modal_workspace_core-*.whl")
    assert wheel.name.endswith(f"-linux_{platform.machine()}.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "mwc-agent=modal_workspace_core.agent:main" in archive.read(entry_points).decode()
    assert any(n.startswith("modal_workspace_core/_core.") and n.endswith(".so") for n in names)
    # The builder's own files never ship.
    assert not any("/__pycache__/" in n or n.endswith(".pyc") for n in names)
    site = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    subprocess.run([*install, "--target", str(site), str(wheel)], check=True)
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import modal_workspace_core as m; "
        "from modal_workspace_core import _core; "
        "assert m.__file__.startswith(sys.argv[1]), m.__file__; print(_core.new_id('ws'))"
    )
    imported = subprocess.run(
        [sys.executable, "-c", probe, str(site)], capture_output=True, text=True, check=True
    )
    assert imported.stdout.startswith("ws-")


def test_the_builder_stage_installs_at_least_the_crates_rust_version() -> None:
    cargo = tomllib.loads((CHECKOUT / "Cargo.toml").read_text())
    needed = tuple(int(part) for part in cargo["package"]["rust-version"].split("."))
    installed = tuple(int(part) for part in RUST_TOOLCHAIN.split("."))

    assert installed[: len(needed)] >= needed
    # And the script the stage runs is part of the context it copies.
    assert BUILD_SCRIPT in Checkout(CHECKOUT).files()
