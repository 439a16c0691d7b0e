"""How `modal-workspace serve` starts and stops, as a real process on real sockets: a port that
is taken is one error line and exit 2 (no banner, no token)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from service_support import TOKEN

pytest.importorskip("modal_workspace_core.drivers.local")

SCRIPT = Path(sys.executable).with_name("modal-workspace")
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# A generous bound for "within a couple of seconds": these machines are noisy.
STOP_BOUND = 10.0


def server_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    return env | {"MODAL_WORKSPACE_DATA_ROOT": str(tmp / "data"), **extra}


def test_a_port_in_use_is_one_error_line_and_exit_2_with_no_banner_nor_token(
    tmp_path: Path,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [str(SCRIPT), "serve", "--port", str(port)],
            env=server_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2
    assert done.stdout == "", "no banner"
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"127.0.0.1:{port}" in lines[0]
    assert "already in use" in lines[0] and "--port" in lines[0]
    assert "token" not in done.stderr.lower()
