"""The `modal-workspace` command: `token` mints tokens, `serve` documents its flags and refuses
to serve a non-loopback address without a configured token."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from modal_workspace_core.surfaces.cli import is_loopback, mint_token
from service_support import free_port

SCRIPT = Path(sys.executable).with_name("modal-workspace")


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = (
        [str(SCRIPT)]
        if SCRIPT.exists()
        else [sys.executable, "-m", "modal_workspace_core.surfaces.cli"]
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_WORKSPACE_")}
    return subprocess.run(
        [*command, *args], env={**base, **(env or {})}, capture_output=True, text=True, timeout=120
    )


def test_the_console_script_is_installed() -> None:
    assert SCRIPT.exists()


def test_token_prints_a_fresh_url_safe_token_each_time() -> None:
    first, second = cli("token"), cli("token")
    assert first.returncode == 0 and second.returncode == 0
    a, b = first.stdout.strip(), second.stdout.strip()
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", a)
    assert a != b
    assert len(mint_token()) == 43
    as_json = cli("token", "--json")
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", json.loads(as_json.stdout)["token"])


def test_serve_help_lists_its_flags_and_where_tokens_come_from() -> None:
    done = cli("serve", "--help")
    assert done.returncode == 0
    for flag in ("--host", "--port", "--driver", "--data-root"):
        assert flag in done.stdout
    assert "MODAL_WORKSPACE_MCP_TOKEN" in " ".join(done.stdout.split())


def test_serve_refuses_a_public_address_without_a_token() -> None:
    done = cli("serve", "--host", "0.0.0.0", "--port", "9")
    assert done.returncode == 2
    assert "refusing" in done.stderr and "MODAL_WORKSPACE_MCP_TOKEN" in done.stderr


def test_serve_reports_a_bad_setting_by_its_name() -> None:
    done = cli("serve", env={"MODAL_WORKSPACE_MCP_TOKEN": "short"})
    assert done.returncode == 2
    assert "MODAL_WORKSPACE_MCP_TOKEN" in done.stderr
    assert "short" not in done.stderr


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.8.9.1", True), ("localhost", True), ("::1", True),
     ("[::1]", True), ("0.0.0.0", False), ("192.0.2.1", False), ("example.org", False)],
)  # fmt: skip
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_serve_reports_a_bad_driver_setting_in_one_line(tmp_path: Path) -> None:
    # A free port: the server binds it before it starts its driver.
    done = cli(
        "serve",
        "--port",
        str(free_port()),
        env={"MODAL_WORKSPACE_ISOLATION": "bogus", "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path)},
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "MODAL_WORKSPACE_ISOLATION" in done.stderr and "auto, bwrap or none" in done.stderr


def banner(tmp_path: Path, path: str, **env: str) -> str:
    """What `serve` prints before it serves (with `PATH` set to `path`); then stops it."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_WORKSPACE_")}
    env = {**base, "PATH": path, "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "data"), **env}
    argv = [str(SCRIPT), "serve", "--port", str(free_port())]
    process = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert process.stdout is not None
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if "health:" in line:
                break
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(30)
    return "".join(lines)


def test_the_banner_says_how_to_install_bubblewrap_when_it_is_missing(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    text = banner(tmp_path, str(tmp_path / "bin"))
    assert "NONE (bubblewrap (bwrap) is not installed)" in text
    assert "apt-get install bubblewrap passt" in text
    assert "unprivileged user namespaces" in text


def test_the_banner_says_what_bubblewrap_needs_when_it_does_not_work(tmp_path: Path) -> None:
    # A bwrap that fails as it does on a kernel that refuses unprivileged user namespaces.
    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    text = banner(tmp_path, f"{fake.parent}:{os.environ['PATH']}")
    assert "bwrap does not work here: bwrap: No permissions to create new namespace" in text
    assert "apt-get install bubblewrap passt" in text
    assert "unprivileged user namespaces" in text


def test_the_banner_says_how_to_turn_isolation_back_on(tmp_path: Path) -> None:
    text = banner(tmp_path, os.environ["PATH"], MODAL_WORKSPACE_ISOLATION="none")
    assert "NONE (isolation turned off)" in text
    assert "MODAL_WORKSPACE_ISOLATION=auto" in text and "apt-get" not in text
