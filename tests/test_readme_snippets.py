"""The README's Python example and MCP snippet run as printed: each is taken from its marked
code block and run as a program of its own, set up the way the README tells a reader to (the
walkthrough's demo git server and its printed exports; a server's MCP URL and token), and leaves
no workspace behind."""

from __future__ import annotations

import contextlib
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
from e2e_support import local_backend, serve
from service_support import TOKEN
from support.fake_github import FakeGitHub
from support.git_server import GitServer
from support.readme import readme_block

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

pytest.importorskip("modal_workspace_core.drivers.local.driver")


def run_snippet(tmp: Path, name: str, env: dict[str, str]) -> str:
    """Runs the block as `python example.py` in a directory of its own; returns its stdout."""
    script = tmp / f"{name}.py"
    script.write_text(readme_block(name))
    # Nothing of this process's settings reaches the snippet but what the README has one set.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp,
        env=clean | env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@contextlib.contextmanager
def demo_git_server(tmp: Path) -> Iterator[dict[str, str]]:
    """`examples/demo_git_server.py` as the walkthrough starts it; yields the settings it
    prints for the reader to export."""
    script = ROOT / "examples" / "demo_git_server.py"
    process = subprocess.Popen(
        [sys.executable, str(script), "--dir", str(tmp / "demo-git")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        bufsize=0,
    )
    assert process.stdout is not None
    printed, deadline = b"", time.monotonic() + 60
    try:
        # The last setting it prints is the host port; everything before it is there by then.
        while b"MODAL_WORKSPACE_HOST_PORTS=" not in printed or not printed.endswith(b"\n"):
            assert process.poll() is None, printed.decode(errors="replace")
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"the demo git server printed only {printed!r}"
            if select.select([process.stdout], [], [], remaining)[0]:
                printed += os.read(process.stdout.fileno(), 65536)
        exports = dict(
            re.findall(r"^\s*export (MODAL_WORKSPACE_\w+)=(\S+)$", printed.decode(), re.M)
        )
        yield exports
    finally:
        process.send_signal(signal.SIGINT)  # it stops its server on Ctrl-C
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def test_the_readme_python_example_runs_offline_as_printed(tmp_path: Path) -> None:
    data_root = tmp_path / "data"
    with demo_git_server(tmp_path) as exports:
        assert {"MODAL_WORKSPACE_GITHUB_URL", "MODAL_WORKSPACE_LOCAL_SECRETS_FILE"} <= set(exports)
        out = run_snippet(
            tmp_path, "python-api", exports | {"MODAL_WORKSPACE_DATA_ROOT": str(data_root)}
        )
    assert out.startswith("hi\nclone finished 0\n"), out
    assert "test_greets_by_name" in out and "\nOK\n" in out, out
    assert '+    return f"Hello, {name}! Welcome."' in out, out
    # Leaving the blocks terminated the workspace: its directory (files, logs, agent) is gone.
    assert list(data_root.glob("ws-*")) == []


def test_the_readme_mcp_snippet_runs_against_a_server_as_printed(tmp_path: Path) -> None:
    with local_backend(tmp_path, "ghp_unused") as backend, serve(tmp_path, "", backend) as served:
        env = {"MODAL_WORKSPACE_MCP_URL": f"{served.base_url}/mcp/"}
        out = run_snippet(tmp_path, "mcp-client", env | {"MODAL_WORKSPACE_MCP_TOKEN": TOKEN})
        # It waited out a quiet command over long-polls longer than httpx2's default timeout.
        assert out == "Linux\nbuilt\n", out
        auth = {"Authorization": f"Bearer {TOKEN}"}
        listed = httpx2.get(f"{served.api}/workspaces", headers=auth, timeout=60).json()
        assert listed["workspaces"] == [], "the snippet left its workspace running"


def test_the_mcp_walkthrough_example_runs_offline_as_the_readme_shows(tmp_path: Path) -> None:
    with (
        demo_git_server(tmp_path) as exports,
        local_backend(tmp_path, "ghp_unused") as backend,
        # The walkthrough's exports win over the test backend's own secrets file.
        serve(tmp_path, "", backend, github_env=exports) as served,
    ):
        script = ROOT / "examples" / "mcp_walkthrough.py"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
        done = subprocess.run(
            [sys.executable, str(script), f"{served.base_url}/mcp/", "--use-github-token"],
            env=clean | {"MODAL_WORKSPACE_MCP_TOKEN": TOKEN},
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
        for line in (
            "clone finished, returncode 0",
            "tests finished, returncode 0",
            "sent 4 bytes of stdin",
            "  | hello, Ada",
            "sleep 600 cancelled, returncode -15",
            '+    return f"Hello, {name}! Welcome."',
        ):
            assert f"\n{line}\n" in done.stdout, done.stdout
        assert '"terminated": true' in done.stdout.splitlines()[-1], done.stdout
        auth = {"Authorization": f"Bearer {TOKEN}"}
        listed = httpx2.get(f"{served.api}/workspaces", headers=auth, timeout=60).json()
        assert listed["workspaces"] == []


def run_sh_block(name: str, api: str) -> list[str]:
    """Runs the README's shell block `name` with bash (strict mode) against the server at `api`
    with the test token, as a reader would with `$API` and `$TOKEN` set; its non-empty lines."""
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", readme_block(name, "sh")],
        env={**os.environ, "API": api, "TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return [line for line in done.stdout.splitlines() if line]


def test_the_readme_snapshots_section_runs_against_a_server_as_printed(tmp_path: Path) -> None:
    if shutil.which("curl") is None or shutil.which("jq") is None:
        pytest.skip("the section uses curl and jq (.ci/run installs them)")
    with local_backend(tmp_path, "ghp_unused") as backend, serve(tmp_path, "", backend) as served:
        lines = run_sh_block("snapshots", served.api)  # writes print nothing
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
        headers = {"Authorization": f"Bearer {TOKEN}"}
        left = httpx2.get(f"{served.api}/workspaces", headers=headers, timeout=30).json()
        assert left["workspaces"] == [], "the section left a workspace behind"
    assert list((served.data_root / "snapshots").glob("ws-*/sn-*")) == []


def test_the_readme_delivery_section_runs_against_the_stand_in_github_as_printed(
    tmp_path: Path, github_app: FakeGitHub, git_server: GitServer
) -> None:
    if shutil.which("curl") is None or shutil.which("jq") is None:
        pytest.skip("the section uses curl and jq (.ci/run installs them)")
    # What `examples/demo_git_server.py --app` serves: octocat/hello with the App installed.
    git_server.create_repo("octocat/hello", {"main": {"README.md": "# hello\n"}})
    github_app.add_repo("octocat/hello", installation_id=7777)
    env = github_app.gateway_env
    with (
        local_backend(tmp_path, "ghp_unused") as backend,
        serve(tmp_path, "", backend, github_env=env) as served,
    ):
        lines = run_sh_block("delivery", served.api)
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
    # The comments beside the block say what it printed.
    block = readme_block("delivery", "sh")
    for printed in ('{"branch":"main","files":["answer.py"]}', '{"number":1,"created":false}'):
        assert printed in block
    # One token per operation: the clone, the push and each pull request call.
    assert [m.repositories for m in github_app.minted] == [("octocat/hello",)] * 4
