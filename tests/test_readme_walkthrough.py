"""The README, followed as a reader follows it: `make demo` started (`examples/demo.py`, in a
directory of its own), its printed lines pasted into one terminal, then every block the README
asks the reader to run, in the README's order, in that terminal: the REST walkthrough, the MCP
walkthrough, the Python examples (saved under the names the README gives), artifacts, snapshots,
templates, experiments, the terminal, previews and delivery. What each console command prints
must match its transcript (`support/readme_session.py` says how), and the journey leaves no
workspace behind.

Blocks that are not run here are named below with the reason; a new block must be added to one
list or the other."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from e2e_support import free_port, terminate_every_workspace
from service_support import TOKEN
from support.readme import README
from support.readme_session import Block, ShellSession, commands_of, matches, readme_blocks

ROOT = Path(__file__).resolve().parent.parent
README_PORT = "127.0.0.1:8765"
# The Python blocks, saved where the README says to save them.
SAVED_AS = {"python-api": "example.py", "mcp-client": "mcp_client.py"}
# Shell blocks not run here, by their first line, and why.
NOT_RUN_SH = {
    "make serve": "the two commands: CI runs `make test`; the demo stands in for `make serve`",
    "git clone https://github.com/<owner>/": "deploying on Modal needs a Modal account",
    "curl -s https://<workspace>--": "checking a deploy on Modal needs one",
    "claude mcp add": "a host's configuration: parsed by test_readme_quickstarts",
}
# Commands that stand for what the reader pastes: the test pastes it instead.
PLACEHOLDERS = {"export TOKEN=…"}

pytestmark = pytest.mark.skipif(
    shutil.which("curl") is None or shutil.which("jq") is None,
    reason="the README's commands use curl and jq (.ci/run installs them)",
)


def start_demo(cwd: Path, port: int) -> tuple[subprocess.Popen[bytes], list[str]]:
    """`make demo` on `port`, in `cwd`; its process and the lines it printed up to the server's
    banner."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    # The operator's token as the reader may set it (else the demo keeps one of its own): the
    # test's, so that teardown can end what a failing run left.
    env["MODAL_WORKSPACE_MCP_TOKEN"] = TOKEN
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--port", str(port)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert process.stdout is not None
    printed, deadline = b"", time.monotonic() + 120
    while b"\n  health:" not in printed:
        assert process.poll() is None, printed.decode(errors="replace")
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"the demo printed only {printed!r}"
        if select.select([process.stdout], [], [], remaining)[0]:
            printed += os.read(process.stdout.fileno(), 65536)
    return process, printed.decode().splitlines()


def wait_healthy(base: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx2.get(f"{base}/healthz", timeout=5).status_code == 200:
                return
        except httpx2.HTTPError:
            pass
        assert time.monotonic() < deadline, "the demo's server never answered"
        time.sleep(0.2)


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[tuple[int, list[str]]]:
    # The reader's checkout, as far as the README's commands reach into it.
    for name in (".venv", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    port = free_port()
    process, printed = start_demo(tmp_path, port)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base)
        yield port, printed
    finally:
        # Workspaces outlive their server by design: a run that failed midway leaves some.
        terminate_every_workspace(base)
        os.killpg(process.pid, signal.SIGINT)  # Ctrl+C, as the README says
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def check_snapshots(lines: list[str]) -> None:
    lineage = json.loads(lines[0])
    assert lineage["parent_workspace_id"].startswith("ws-")
    assert lineage["snapshot_id"].startswith("sn-")
    assert lines[1] == "draft"  # the fork has the files of the snapshot
    resumed = json.loads(lines[2])
    assert resumed == {"state": "running", "resumed_from": lineage["snapshot_id"]}
    assert lines[3] == "draft"  # and so has the workspace, back at it
    # The snapshot that answered "taking": its stream ended with it.
    assert json.loads(lines[4]) == {"state": "finished", "snapshot": "ready"}
    ended = json.loads(lines[5])
    assert ended["terminated"] and ended["snapshot_id"].startswith("sn-")
    assert lines[6:] == ["running", "true", "true"]


def check_templates(lines: list[str]) -> None:
    assert json.loads(lines[0]) == {"state": "ready", "build": 1}
    assert json.loads(lines[1]) == {"template": "hello", "template_build": 1}
    assert lines[2] == "2"  # what the setup made (byte-compiled modules) is in the workspace
    listed = {"name": "hello", "state": "ready", "build": 1, "failed_build": None}
    assert json.loads(lines[3]) == listed
    assert lines[4] == "true"
    assert json.loads(lines[5]) == {"name": "hello", "deleted": True, "builds_deleted": 1}


def check_experiments(lines: list[str]) -> None:
    loss = {"last": 4, "min": 4, "max": 12, "count": 3}
    run = {"name": "three steps", "state": "finished", "returncode": 0, "loss": loss}
    # Its output as it came, the workspace's metrics stream with the run's reports, the record.
    assert lines[:3] == [f"::metric loss={12 // step} step={step}" for step in (1, 2, 3)]
    assert lines[3] == "mt-"
    assert json.loads(lines[4]) == [12, 6, 4]
    assert json.loads(lines[5]) == run
    assert lines[6:] == ["1", "true"]


def check_terminal(lines: list[str]) -> None:
    ticket = r"\.ws-[0-9a-f]{32}\.ex-[0-9a-f]{32}\.[0-9]+\.[\w-]{22}\.[\w-]{43}"
    page = r"http://127\.0\.0\.1:[0-9]+/pages/terminals/terminal-"
    assert lines[0] == "false"
    assert re.fullmatch(page + "read" + ticket, lines[1]), lines[1]
    assert json.loads(lines[2]) == {"write": True, "shell": "ex-"}
    assert re.fullmatch(page + "write" + ticket, lines[3]), lines[3]
    assert lines[4:] == ["true"]


def check_delivery(lines: list[str]) -> None:
    assert lines[0] == "0"
    assert json.loads(lines[1]) == {"branch": "main", "files": ["answer.py"]}
    pushed = json.loads(lines[2])
    assert pushed["remote_branch"].startswith("agent/ws-")
    del pushed["remote_branch"]
    assert pushed == {
        "pushed": True,
        "created": True,
        "commits": ["Answer the question"],
        "files": ["answer.py"],
    }
    assert json.loads(lines[3]) == {"number": 1, "draft": True, "created": True}
    assert json.loads(lines[4]) == {"number": 1, "created": False}
    assert lines[5:] == ["true"]


def check_previews(lines: list[str]) -> None:
    # The link is on the preview's own host name (the workspace's id and port under
    # localhost, at the gateway's port), with a preview ticket for them in its path.
    named = re.fullmatch(
        r"http://p-([0-9a-f]{32})-8000\.localhost:\d+/preview/preview\.ws-([0-9a-f]{32})\.8000\.\S+/",
        lines[0],
    )
    assert named and named[1] == named[2], lines[0]
    assert lines[1:] == ["<h1>Hello from the workspace</h1>", "403", "port", "true"]


SH_CHECKS = {
    "snapshots": check_snapshots,
    "templates": check_templates,
    "experiments": check_experiments,
    "terminal": check_terminal,
    "previews": check_previews,
    "delivery": check_delivery,
}


def run_console(session: ShellSession, block: Block, port: int, banner: list[str]) -> None:
    for command in commands_of(block.code):
        text = command.text.replace(README_PORT, f"127.0.0.1:{port}")
        printed = [line.replace(README_PORT, f"127.0.0.1:{port}") for line in command.printed]
        if text.startswith("make demo"):
            ran = banner  # started by the fixture, as the reader started it
        elif text.split("#")[0].strip() in PLACEHOLDERS:
            continue
        else:
            status, ran = session.run(text)
            stderr = session.stderr.read_text()[-3000:]
            assert status == 0, f"README line {block.line}: {text!r} exited {status}:\n{stderr}"
        mismatch = matches(printed, ran)
        assert mismatch is None, f"README line {block.line}: {text!r}: {mismatch}"


def test_every_readme_block_runs_in_order_after_make_demo(
    demo: tuple[int, list[str]], tmp_path: Path
) -> None:
    port, banner = demo
    session = ShellSession(
        tmp_path, {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    )
    # The reader pastes the lines the demo printed for them.
    pasted = [line.strip() for line in banner if line.startswith("  export ")]
    pasted += [line.split("#")[0].strip() for line in banner if line.startswith("  . ")]
    assert len(pasted) == 2, banner
    for line in pasted:
        assert session.run(line)[0] == 0, line
    token = re.search(r"export TOKEN=(\S+)", pasted[0])
    assert token is not None
    ran_blocks, readme = [], README.read_text()
    try:
        for block in readme_blocks():
            first = block.code.strip().splitlines()[0]
            if block.language == "console":
                run_console(session, block, port, banner)
            elif block.language == "python" and block.marker in SAVED_AS:
                name = SAVED_AS[block.marker]
                assert f"`{name}`" in readme, f"the README never says to save it as {name}"
                (tmp_path / name).write_text(block.code)
            elif block.language == "sh" and block.marker in SH_CHECKS:
                status, lines = session.run(f"(set -euo pipefail\n{block.code})")
                stderr = session.stderr.read_text()[-3000:]
                assert status == 0, f"README line {block.line} ({block.marker}):\n{stderr}"
                SH_CHECKS[block.marker]([line for line in lines if line])
            elif block.language == "sh":
                assert any(first.startswith(known) for known in NOT_RUN_SH), (
                    f"README line {block.line}: a shell block this test neither runs nor "
                    f"knows why not: {first!r}"
                )
                continue
            else:
                # Pictures, output shown and configurations (test_readme_quickstarts).
                assert block.language in ("mermaid", "text", "json", "python"), block.language
                continue
            ran_blocks.append(block.marker or block.language)
    finally:
        session.close()
    assert ran_blocks.count("console") >= 5
    ran = set(ran_blocks)
    assert {"snapshots", "templates", "experiments", "terminal", "previews", "delivery"} <= ran
    auth = {"Authorization": f"Bearer {token[1]}"}
    left = httpx2.get(f"http://127.0.0.1:{port}/api/workspaces", headers=auth, timeout=60)
    assert left.json()["workspaces"] == [], "the README's blocks left a workspace behind"
    # Purged with their workspaces: no snapshot is left on disk, and the in-process example
    # terminated what it made.
    assert list((tmp_path / ".demo" / "data" / "snapshots").glob("ws-*/sn-*")) == []
    assert list((tmp_path / ".demo" / "python-data").glob("ws-*")) == []
