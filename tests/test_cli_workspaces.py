"""The `modal-workspace` command line driving workspaces, as a person or a script runs it: the
real console script in a subprocess, both ways it reaches workspaces (REST against a running
`modal-workspace serve` on 127.0.0.1, and in process on a data root of its own), on the local
driver with the real agent. One server, one git server and one workspace per module and mode.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pty
import queue
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import typer
from e2e_support import Served, local_backend, serve
from modal_workspace_core.surfaces.cli.app import app
from service_support import TOKEN
from support.git_server import HELLO_REPO, GitServer
from typer.testing import CliRunner

SCRIPT = Path(sys.executable).with_name("modal-workspace")
MODES = ("rest", "in-process")


@dataclass
class Cli:
    """The console script with one mode's environment."""

    mode: str
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def ok(self, *args: str) -> str:
        """stdout of a run that must succeed."""
        done = self.run(*args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done.stdout

    def json(self, *args: str) -> Any:
        """The one JSON document a `--json` run prints on stdout (nothing else is there)."""
        return json.loads(self.ok(*args) if "--json" in args else self.ok(*args, "--json"))


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any of the product's settings, wide enough that no
    help line wraps."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
    return {**env, "COLUMNS": "200", **extra}


@pytest.fixture(scope="module")
def git(tmp_path_factory: pytest.TempPathFactory, hello_repo_template: Path) -> Iterator[GitServer]:
    """The module's stand-in GitHub, holding `octo/hello`."""
    root = tmp_path_factory.mktemp("cli-git") / "repos"
    shutil.copytree(hello_repo_template, root, symlinks=True)
    server = GitServer(root=root, username="x-access-token", token="ghp_" + "c1" * 16).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, git: GitServer) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("cli-server")
    with (
        local_backend(tmp, git.token) as backend,
        serve(tmp, git.token, backend, github_env=git.gateway_env) as served,
    ):
        yield served


@pytest.fixture(scope="module", params=MODES)
def cli(
    request: pytest.FixtureRequest,
    server: Served,
    git: GitServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cli]:
    if request.param == "rest":
        yield Cli(
            "rest", clean_env(MODAL_WORKSPACE_URL=server.base_url, MODAL_WORKSPACE_TOKEN=TOKEN)
        )
        return  # the server's teardown ends its workspaces
    tmp = tmp_path_factory.mktemp("cli-in-process")
    with local_backend(tmp, git.token) as backend:
        env = clean_env(
            MODAL_WORKSPACE_DATA_ROOT=str(tmp / "data"),
            MODAL_WORKSPACE_ALLOWED_SECRETS="github:GH_TOKEN",
            **backend.env,
            **git.gateway_env,
        )
        local = Cli("in-process", env)
        try:
            yield local
        finally:
            # Workspaces outlive the command that made them: end this module's.
            with contextlib.suppress(Exception):
                for ws in local.json("list")["workspaces"]:
                    local.run("terminate", ws["workspace_id"], "--purge")


@pytest.fixture(scope="module")
def workspace(cli: Cli) -> str:
    created = cli.json("create", "--tag", "suite=cli")
    return str(created["workspace_id"])


# --- help ----------------------------------------------------------------------------------------


def test_help_lists_every_command_with_one_line_saying_what_it_does() -> None:
    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    expected = {
        "serve", "token", "create", "clone", "list", "get", "exec", "logs", "cp", "snapshot",
        "fork", "resume", "terminate", "shell", "open",
    }  # fmt: skip
    assert expected <= set(commands)
    done = subprocess.run(
        [str(SCRIPT), "--help"], env=clean_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    runner = CliRunner()
    for name, command in commands.items():
        summary = command.get_short_help_str(limit=200)
        assert summary.endswith("."), name
        # One line: the command's name and its whole summary.
        assert any(f" {name} " in line and summary in line for line in lines), (name, summary)
        own = runner.invoke(
            app, [name, "--help"], env={"COLUMNS": "200"}, prog_name="modal-workspace"
        )
        assert own.exit_code == 0, name
        assert summary in " ".join(own.output.split()), name


def test_shell_completion_is_offered() -> None:
    done = subprocess.run(
        [str(SCRIPT), "--show-completion", "bash"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "_MODAL_WORKSPACE_COMPLETE" in done.stdout


# --- exec ----------------------------------------------------------------------------------------


def test_exec_streams_output_as_it_comes_and_exits_with_the_commands_code(
    cli: Cli, workspace: str
) -> None:
    marker = f"go-{cli.mode}"
    # It prints, then waits for a file that only appears once this test has seen the line.
    script = f"echo first; while [ ! -e {marker} ]; do sleep 0.1; done; echo second >&2; exit 3"
    process = subprocess.Popen(
        [str(SCRIPT), "exec", workspace, script],
        env=cli.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(line) for line in process.stdout or ()], daemon=True
    ).start()
    try:
        assert lines.get(timeout=120) == "first\n"
        assert process.poll() is None  # the command is still waiting: the line came live
        cli.ok("exec", workspace, f"touch {marker}")
        assert process.wait(120) == 3
    finally:
        if process.poll() is None:
            process.kill()
    assert process.stderr.read() == "second\n"


def test_exec_takes_a_command_and_its_arguments_quoted_as_given(cli: Cli, workspace: str) -> None:
    out = cli.ok("exec", workspace, "printf", "[%s]\n", "a b", "$HOME", "*")
    assert out == "[a b]\n[$HOME]\n[*]\n"
    # A signal's end is a shell's 128 + N.
    assert cli.run("exec", workspace, "kill -TERM $$").returncode == 128 + 15


def test_exec_json_is_one_document_with_the_output(cli: Cli, workspace: str) -> None:
    done = cli.run("exec", "--json", workspace, "printf 'out\\377'; echo err >&2; exit 4")
    assert done.returncode == 4
    document = json.loads(done.stdout)
    assert document["returncode"] == 4 and document["state"] == "finished"
    assert document["stderr"] == "err\n"
    assert document["stdout_b64"] == "b3V0/w=="  # b"out\xff", not UTF-8


def test_logs_prints_an_exec_and_follows_it(cli: Cli, workspace: str) -> None:
    started = cli.json("exec", "--json", workspace, "echo one; echo two >&2")
    exec_id = started["exec_id"]
    assert cli.ok("logs", workspace, exec_id) == "one\n"
    followed = cli.run("logs", "-f", workspace, exec_id)
    assert followed.returncode == 0 and followed.stdout == "one\n" and followed.stderr == "two\n"
    document = cli.json("logs", workspace, exec_id)
    assert document["done"] is True and document["stdout"] == "one\n"
    assert [e["type"] for e in document["events"]][-1] in ("exit", "status")


# --- cp ------------------------------------------------------------------------------------------


def make_tree(root: Path) -> dict[str, bytes]:
    """A tree with a binary file, an empty file and directory, nested directories and a name
    with spaces; its files' bytes by relative path."""
    files = {
        "binary.bin": bytes(range(256)) * 64 + os.urandom(4096) + b"\xff\xfe\x00",
        "empty": b"",
        "a/b/c/deep.txt": "nested, ünïcode\n".encode(),
        "with space.txt": b"a name with spaces\n",
    }
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "empty-dir").mkdir()
    return files


def tree_of(root: Path) -> dict[str, bytes | None]:
    """Every entry under `root`: a file's bytes, None for a directory."""
    return {
        p.relative_to(root).as_posix(): (None if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
    }


def test_cp_round_trips_a_tree_byte_exact_both_ways(
    cli: Cli, workspace: str, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    files = make_tree(source)
    remote = f"{workspace}:/workspace/copied-{cli.mode}"

    sent = cli.json("cp", str(source), remote)
    assert sent["kind"] == "dir" and sent["bytes"] == sum(len(d) for d in files.values())
    # In the workspace, the bytes are the ones sent.
    listing = cli.ok(
        "exec",
        workspace,
        f"cd copied-{cli.mode} && find . -type f -exec sha256sum {{}} + | sort -k2",
    )
    expected = sorted((hashlib.sha256(d).hexdigest(), f"./{n}") for n, d in files.items())
    assert [tuple(line.split("  ", 1)) for line in listing.splitlines()] == [
        (digest, name) for digest, name in sorted(expected, key=lambda x: x[1])
    ]
    assert cli.ok("exec", workspace, f"test -d copied-{cli.mode}/empty-dir && echo dir") == "dir\n"

    back = tmp_path / "back"
    got = cli.json("cp", remote, str(back))
    assert got["kind"] == "dir"
    assert tree_of(back) == tree_of(source)

    if cli.mode == "in-process":
        return  # the rest is the same command on either client
    # Into an existing directory, as cp does; what is there is replaced only when asked.
    into = tmp_path / "into"
    into.mkdir()
    cli.ok("cp", remote, str(into))
    assert tree_of(into / f"copied-{cli.mode}") == tree_of(source)
    refused = cli.run("cp", remote, str(into))
    assert refused.returncode == 1 and "--overwrite" in refused.stderr
    (into / f"copied-{cli.mode}" / "stray").write_text("left from before")
    cli.ok("cp", "--overwrite", remote, str(into))
    assert tree_of(into / f"copied-{cli.mode}") == tree_of(source)


def test_cp_copies_one_file_both_ways(cli: Cli, workspace: str, tmp_path: Path) -> None:
    data = os.urandom(70_000) + b"\x00\xff"
    (tmp_path / "one file.bin").write_bytes(data)
    remote = f"{workspace}:single-{cli.mode}.bin"
    sent = cli.json("cp", str(tmp_path / "one file.bin"), remote)
    assert sent["kind"] == "file" and sent["bytes"] == len(data)
    cli.ok("cp", remote, str(tmp_path / "again.bin"))
    assert (tmp_path / "again.bin").read_bytes() == data
    # A file where the copy lands is replaced only when asked, as the option says.
    (tmp_path / "one file.bin").write_bytes(b"second")
    again = cli.run("cp", str(tmp_path / "one file.bin"), remote)
    assert again.returncode == 1 and "pass --overwrite to replace it" in again.stderr
    cli.ok("cp", "--overwrite", str(tmp_path / "one file.bin"), remote)
    cli.ok("cp", "--overwrite", remote, str(tmp_path / "again.bin"))
    assert (tmp_path / "again.bin").read_bytes() == b"second"


@pytest.mark.parametrize("cli", ["rest"], indirect=True)
def test_cp_needs_one_side_in_a_workspace(cli: Cli, tmp_path: Path) -> None:
    done = cli.run("cp", str(tmp_path), str(tmp_path / "x"))
    assert done.returncode == 1 and "ws-" in done.stderr


# --- the workspace's life ------------------------------------------------------------------------


def test_list_and_get_answer_json(cli: Cli, workspace: str) -> None:
    listed = cli.json("list")
    assert workspace in [ws["workspace_id"] for ws in listed["workspaces"]]
    assert cli.json("get", workspace)["tags"]["suite"] == "cli"
    if cli.mode == "in-process":
        return  # the rest holds in both modes alike
    assert workspace in cli.ok("list")
    missing = cli.run("get", "ws-" + "0" * 32, "--json")
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["error"]["code"] == "not_found"


def test_snapshot_follows_its_progress_to_the_snapshot(cli: Cli, workspace: str) -> None:
    snapshot = cli.json("snapshot", workspace, "--label", "cli")
    assert snapshot["state"] == "ready" and snapshot["label"] == "cli"
    assert snapshot["snapshot_id"].startswith("sn-")


# The same commands on the REST client differ only in the client, which the others test.
@pytest.mark.parametrize("cli", ["in-process"], indirect=True)
def test_fork_resume_terminate(cli: Cli, workspace: str) -> None:
    cli.ok("exec", workspace, "echo before > notes.txt")
    snapshot_id = cli.ok("snapshot", workspace).strip()
    cli.ok("exec", workspace, "echo after > notes.txt")

    forked = cli.json("fork", workspace, "--snapshot", snapshot_id)
    fork_id = forked["workspace_id"]
    assert forked["lineage"]["snapshot_id"] == snapshot_id
    assert cli.ok("exec", fork_id, "cat notes.txt") == "before\n"

    resumed = cli.json("resume", workspace, "--snapshot", snapshot_id)
    assert resumed["state"] == "running" and resumed["resumed_from"] == snapshot_id
    assert cli.ok("exec", workspace, "cat notes.txt") == "before\n"

    ended = cli.json("terminate", fork_id, "--purge")
    assert ended["terminated"] is True
    assert cli.run("get", fork_id).returncode == 1


@pytest.mark.parametrize("cli", ["rest"], indirect=True)
def test_create_clones_a_repository_with_its_progress(cli: Cli) -> None:
    created = cli.json("create", "--repo", HELLO_REPO, "--use-github-token")
    ws = created["workspace_id"]
    assert created["clone"]["returncode"] == 0
    assert created["clone"]["destination"] == "/workspace/hello"
    assert cli.ok("exec", ws, "cat hello/src/hello.py") == "print('hello')\n"
    assert cli.ok("terminate", ws).startswith("terminated")


# --- where the commands go -----------------------------------------------------------------------


def test_the_token_comes_from_the_environment_or_a_file_and_is_checked(
    server: Served, tmp_path: Path
) -> None:
    at = {"MODAL_WORKSPACE_URL": server.base_url}
    none = subprocess.run(
        [str(SCRIPT), "list"], env=clean_env(**at), capture_output=True, text=True, timeout=60
    )
    assert none.returncode == 2 and "MODAL_WORKSPACE_TOKEN" in none.stderr
    wrong = subprocess.run(
        [str(SCRIPT), "list"],
        env=clean_env(**at, MODAL_WORKSPACE_TOKEN="not-the-token-at-all"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert wrong.returncode == 1 and "unauthenticated" in wrong.stderr
    assert "not-the-token-at-all" not in wrong.stderr
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    by_file = subprocess.run(
        [str(SCRIPT), "--token-file", str(token_file), "list", "--json"],
        env=clean_env(**at),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert by_file.returncode == 0, by_file.stderr
    assert "workspaces" in json.loads(by_file.stdout)


def test_plain_http_goes_only_to_a_loopback_address() -> None:
    done = subprocess.run(
        [str(SCRIPT), "list"],
        env=clean_env(
            MODAL_WORKSPACE_URL="http://gateway.example.com", MODAL_WORKSPACE_TOKEN=TOKEN
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "https" in done.stderr


def test_an_unreachable_gateway_is_one_line(tmp_path: Path) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [str(SCRIPT), "exec", "ws-" + "1" * 32, "true"],
        env=clean_env(MODAL_WORKSPACE_URL="http://127.0.0.1:9", MODAL_WORKSPACE_TOKEN=TOKEN),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 125
    assert "cannot reach the gateway at http://127.0.0.1:9" in done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 60


# --- shell ---------------------------------------------------------------------------------------


class Terminal:
    """`modal-workspace shell` on a pseudo-terminal of this test's: what it printed, keys typed
    into it, its size set as a terminal emulator sets it (then SIGWINCH)."""

    def __init__(self, cli: Cli, workspace: str, rows: int, cols: int) -> None:
        self.master, self.slave = pty.openpty()
        self.size(rows, cols)
        self.saved = termios.tcgetattr(self.slave)
        self.process = subprocess.Popen(
            [str(SCRIPT), "shell", workspace],
            env=cli.env,
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            start_new_session=True,
        )
        self.output = b""

    def size(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def resize(self, rows: int, cols: int) -> None:
        self.size(rows, cols)
        self.process.send_signal(signal.SIGWINCH)

    def wait_raw(self, timeout: float = 120) -> None:
        """Until the shell has put this terminal in raw mode (no echo of its own)."""
        deadline = time.monotonic() + timeout
        while termios.tcgetattr(self.slave)[3] & termios.ECHO:
            assert self.process.poll() is None, self.output
            assert time.monotonic() < deadline, "the terminal never went raw"
            time.sleep(0.05)

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.output:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no {text!r} in {self.output.decode(errors='replace')!r}"
            if select.select([self.master], [], [], remaining)[0]:
                with contextlib.suppress(OSError):
                    self.output += os.read(self.master, 65536)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)
        os.close(self.master)
        os.close(self.slave)


def test_shell_runs_commands_on_a_terminal_and_exits_with_the_shells_status(
    cli: Cli, workspace: str
) -> None:
    terminal = Terminal(cli, workspace, 30, 100)
    try:
        terminal.wait_raw()
        terminal.type("echo $((6*7))-typed\r")
        terminal.wait_for("42-typed")
        # Ctrl+C goes to the shell, which stops its command: this process goes on.
        terminal.type("sleep 60\r")
        time.sleep(1)
        terminal.type("\x03")
        terminal.type("echo after-$((1+1))\r")
        terminal.wait_for("after-2", timeout=30)
        terminal.type("stty size\r")
        # The shell's terminal has this one's size, and follows it when it changes.
        terminal.wait_for("30 100")
        terminal.resize(40, 120)
        time.sleep(1)
        terminal.type("stty size\r")
        terminal.wait_for("40 120")
        terminal.type("exit 7\r")
        assert terminal.process.wait(120) == 7
        # This terminal is as it was: echo and line editing back on.
        assert termios.tcgetattr(terminal.slave) == terminal.saved
    finally:
        terminal.close()


def test_open_prints_a_terminal_link_with_a_ticket_and_never_the_token(
    cli: Cli, workspace: str
) -> None:
    if cli.mode == "in-process":
        # No gateway, so no page: one line that says what to do.
        done = cli.run("open", workspace, "--print")
        assert done.returncode != 0 and "--url" in done.stderr, done.stderr
        return
    answer = cli.json("open", workspace, "--print")
    assert answer["write"] is True and answer["exec_id"].startswith("ex-")
    url = answer["url"]
    assert url.startswith(cli.env["MODAL_WORKSPACE_URL"]) and TOKEN not in url
    page = httpx2.get(url, timeout=30)
    assert page.status_code == 200 and "terminal" in page.text.lower()
    # The shell it opened is an exec of the workspace; a watch link for it reads only.
    watch = cli.json("open", workspace, "--exec", answer["exec_id"], "--print")
    assert watch["write"] is False and watch["exec_id"] == answer["exec_id"]


def test_shell_needs_a_terminal(cli: Cli, workspace: str) -> None:
    done = cli.run("shell", workspace)
    assert done.returncode == 1 and "use exec" in done.stderr
