"""The workspace agent daemon against a real socket: execs, stdin, cancel, timeouts, durable
logs across reconnects and restarts, redaction, flow control, files and watches."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_wire import AGENT, AgentError, Daemon, Wire, output, start_daemon, temp_base


@pytest.fixture
def base() -> Iterator[Path]:
    yield from temp_base()


@pytest.fixture
def daemon(base: Path) -> Iterator[Daemon]:
    d = start_daemon(base)
    yield d
    d.stop()


def start(w: Wire, command: str, **args: Any) -> str:
    """Starts `bash -c COMMAND` (not `bash -lc`: a login shell reads this machine's profile,
    which is slow and may write to stderr)."""
    status = w.call("exec.start", {"argv": ["bash", "-c", command], **args})
    exec_id: str = status["exec_id"]
    return exec_id


def run(w: Wire, command: str, **args: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    exec_id = start(w, command, **args)
    status = w.wait_done(exec_id)
    return status, w.read_all(exec_id)


def events_of(w: Wire, stream: str) -> list[dict[str, Any]]:
    return [e for page in w.pages.get(stream, []) for e in page["events"]]


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


# --- channel -------------------------------------------------------------------------------------


def test_hello_and_ping_name_the_protocol_and_build(daemon: Daemon) -> None:
    w = daemon.wire()
    assert w.peer_hello is not None
    assert w.peer_hello["protocol"] == 1 and w.peer_hello["role"] == "agent"
    ping = w.call("ping")
    assert ping["protocol"] == 1
    assert ping["root"] == str(daemon.root.resolve())


def test_a_protocol_mismatch_is_a_clear_error(daemon: Daemon) -> None:
    w = Wire.unix(daemon.socket, hello=False)
    w.hello(protocol=99)
    with pytest.raises(AgentError) as err:
        w.response(0)
    assert err.value.code == "protocol_mismatch"
    assert "protocol 1" in err.value.message and "protocol 99" in err.value.message
    with pytest.raises(EOFError):
        w.frame(30)


def test_the_socket_is_private_and_a_second_daemon_refuses(daemon: Daemon) -> None:
    assert os.stat(daemon.socket).st_mode & 0o777 == 0o600
    second = subprocess.run([*AGENT, *daemon.args], capture_output=True, timeout=60)
    assert second.returncode != 0
    assert b"another agent daemon is already running" in second.stderr
    daemon.wire().call("ping")  # the first one is untouched


def test_connect_without_a_daemon_fails_with_a_clear_message(base: Path) -> None:
    done = subprocess.run(
        [*AGENT, "connect", "--socket", str(base / "none.sock")], capture_output=True, timeout=60
    )
    assert done.returncode != 0
    assert b"cannot reach the agent daemon" in done.stderr


# --- execs ---------------------------------------------------------------------------------------


def test_200_concurrent_execs_deliver_every_byte_in_order_with_their_exit_codes(
    daemon: Daemon,
) -> None:
    w = daemon.wire()
    script = (
        'for i in $(seq 1 200); do echo "out $N $i"; echo "err $N $i" >&2; done; exit $((N % 7))'
    )
    ids = {}
    rids = [
        w.submit("exec.start", {"argv": ["bash", "-c", script], "env": {"N": str(n)}})
        for n in range(200)
    ]
    for n, rid in enumerate(rids):
        ids[w.response(rid)[0]["exec_id"]] = n
    for exec_id in ids:
        w.submit("subscribe", {"stream": exec_id, "cursor": 0, "credit": 1 << 30})
    done: set[str] = set()
    deadline = time.monotonic() + 120
    while len(done) < len(ids):
        assert time.monotonic() < deadline, f"{len(done)} of 200 finished"
        frame = w.frame()
        if frame.kind == 4:
            page = w.pages[frame.header["stream"]][-1]
            if page["closed"] and not page["has_more"]:
                done.add(frame.header["stream"])
    for exec_id, n in ids.items():
        events = events_of(w, exec_id)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert events[0]["type"] == "status" and events[0]["state"] == "running"
        assert isinstance(events[0]["pid"], int)
        for kind, prefix in [("stdout", "out"), ("stderr", "err")]:
            expected = "".join(f"{prefix} {n} {i}\n" for i in range(1, 201)).encode()
            assert output(events, kind) == expected
        exits = [e for e in events if e["type"] == "exit"]
        assert len(exits) == 1 and exits[0]["returncode"] == n % 7
        assert exits[0]["state"] == "finished"
        assert events[-1] == {**events[-1], "type": "status", "state": "finished"}


def test_stdin_of_10_mib_reaches_the_command_and_eof_ends_it(daemon: Daemon) -> None:
    w = daemon.wire()
    exec_id = start(w, "cat | sha256sum")
    data = os.urandom(10 << 20)
    chunk = 1 << 20
    rids = [
        w.submit("exec.input", {"exec_id": exec_id}, data[i : i + chunk])
        for i in range(0, len(data), chunk)
    ]
    rids.append(w.submit("exec.input", {"exec_id": exec_id, "eof": True}))
    accepted = sum(w.response(rid, timeout=120)[0]["accepted"] for rid in rids)
    assert accepted == len(data)
    status = w.wait_done(exec_id)
    assert status["state"] == "finished" and status["returncode"] == 0
    events = w.read_all(exec_id)
    assert output(events).split()[0].decode() == hashlib.sha256(data).hexdigest()


def test_cancel_kills_the_whole_process_tree(daemon: Daemon) -> None:
    w = daemon.wire()
    exec_id = start(w, "sleep 1000 & sleep 1000 & echo started; wait")
    while b"started" not in output(w.read_all(exec_id)):
        w.read_page(
            exec_id, w.call("exec.status", {"exec_id": exec_id})["last_seq"], wait_seconds=1
        )
    pid = w.call("exec.status", {"exec_id": exec_id})["pid"]
    assert len(group_members(pid)) >= 3
    w.call("exec.cancel", {"exec_id": exec_id, "grace_seconds": 5})
    status = w.wait_done(exec_id)
    assert status["state"] == "cancelled"
    assert group_members(pid) == []
    exits = [e for e in w.read_all(exec_id) if e["type"] == "exit"]
    assert exits[0]["state"] == "cancelled" and exits[0]["signal"] == signal.SIGTERM


def test_a_command_that_traps_term_is_killed_after_the_grace(daemon: Daemon) -> None:
    w = daemon.wire()
    exec_id = start(w, "trap '' TERM; echo armed; while true; do sleep 0.1; done")
    while b"armed" not in output(w.read_all(exec_id)):
        time.sleep(0.05)
    cancelled_at = time.monotonic()
    w.call("exec.cancel", {"exec_id": exec_id, "grace_seconds": 1.0})
    status = w.wait_done(exec_id)
    assert time.monotonic() - cancelled_at >= 1.0
    assert status["state"] == "cancelled" and status["signal"] == signal.SIGKILL
    assert group_members(status["pid"]) == []


TRAPS_TERM = "trap '' TERM; echo armed; while true; do sleep 0.1; done"


def start_armed(w: Wire, count: int) -> list[str]:
    """Starts `count` execs that ignore SIGTERM and waits until each has set its trap."""
    ids = [start(w, TRAPS_TERM) for _ in range(count)]
    for exec_id in ids:
        while b"armed" not in output(w.read_all(exec_id)):
            time.sleep(0.05)
    return ids


def test_cancelling_50_execs_that_trap_term_costs_one_grace_not_50(daemon: Daemon) -> None:
    w = daemon.wire()
    ids = start_armed(w, 50)
    cancelled_at = time.monotonic()
    for exec_id in ids:
        w.call("exec.cancel", {"exec_id": exec_id, "grace_seconds": 1.0})
    statuses = [w.wait_done(exec_id) for exec_id in ids]
    elapsed = time.monotonic() - cancelled_at
    assert {(s["state"], s["signal"]) for s in statuses} == {("cancelled", signal.SIGKILL)}
    # One grace after another would take 50 s; together they take about one. The bound is
    # generous on purpose: it catches a serial path, not a slow machine.
    assert elapsed < 20


def test_a_daemon_stopping_with_50_execs_that_trap_term_ends_all_together(base: Path) -> None:
    d = start_daemon(base)
    ids = start_armed(d.wire(), 50)
    stopped_at = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(120) == 0
    # Its grace is 2 s: one exec after another would take 100 s.
    assert time.monotonic() - stopped_at < 20
    d2 = start_daemon(base)
    try:
        w = d2.wire()
        states = {w.call("exec.status", {"exec_id": i})["state"] for i in ids}
        assert states == {"cancelled"}, "every end was recorded before the daemon exited"
    finally:
        d2.stop()


def test_cancel_before_start_means_the_command_never_runs(daemon: Daemon) -> None:
    w = daemon.wire()
    exec_id = "ex-" + "0123456789abcdef" * 2
    status = w.call("exec.cancel", {"exec_id": exec_id})
    assert status["state"] == "cancelled" and status["pid"] is None
    marker = daemon.root / "ran"
    again = w.call("exec.start", {"exec_id": exec_id, "command": f"touch {marker}"})
    assert again["state"] == "cancelled" and again["pid"] is None
    time.sleep(0.5)
    assert not marker.exists()
    events = w.read_all(exec_id)
    assert [e["type"] for e in events] == ["exit", "status"]
    assert events[0]["state"] == "cancelled" and events[0]["returncode"] is None


def test_a_timeout_ends_the_command_as_timed_out(daemon: Daemon) -> None:
    w = daemon.wire()
    status, events = run(w, "sleep 1000", timeout_seconds=0.5, kill_grace_seconds=1)
    assert status["state"] == "timed_out"
    assert next(e for e in events if e["type"] == "exit")["state"] == "timed_out"


def test_a_secret_split_across_two_writes_is_redacted_everywhere(daemon: Daemon) -> None:
    w = daemon.wire()
    secret = "s3cr3t-value-0123456789"
    command = 'printf "token=%s" "${S:0:9}"; sleep 0.3; printf "%s done\\n" "${S:9}"'
    status, events = run(w, command, env={"S": secret}, secrets=[secret])
    assert status["returncode"] == 0
    assert output(events) == b"token=[REDACTED] done\n"
    for path in daemon.state.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    assert secret not in (daemon.base / "daemon.log").read_text()


def test_bad_arguments_are_refused_naming_the_field(daemon: Daemon) -> None:
    w = daemon.wire()
    cases = [
        ({"command": "true", "env": {"BAD-NAME": "x"}}, "env"),
        ({"command": "true", "workdir": "../outside"}, "workdir"),
        ({"command": "true", "exec_id": "ex-nothex"}, "exec_id"),
        ({}, "command"),
    ]
    for args, field in cases:
        with pytest.raises(AgentError) as err:
            w.call("exec.start", args)
        assert err.value.code == "invalid_argument" and err.value.field == field


def test_a_pty_exec_is_resized_and_reads_its_input(daemon: Daemon) -> None:
    w = daemon.wire()
    exec_id = start(
        w, "stty size; read line; stty size; echo got-$line", pty={"rows": 24, "cols": 80}
    )
    while b"24 80" not in output(w.read_all(exec_id)):
        time.sleep(0.05)
    resized = w.call("exec.resize", {"exec_id": exec_id, "rows": 30, "cols": 100})
    assert resized == {"exec_id": exec_id, "rows": 30, "cols": 100}
    w.call("exec.input", {"exec_id": exec_id}, b"hello\n")
    status = w.wait_done(exec_id)
    assert status["state"] == "finished" and status["pty"] == {"rows": 30, "cols": 100}
    text = output(w.read_all(exec_id)).replace(b"\r\n", b"\n")
    assert b"30 100\n" in text and b"got-hello\n" in text


def test_sigterm_stops_the_daemon_and_records_the_end_of_running_execs(base: Path) -> None:
    d = start_daemon(base)
    w = d.wire()
    exec_id = start(w, "echo up; sleep 1000")
    while b"up" not in output(w.read_all(exec_id)):
        time.sleep(0.05)
    pid = w.call("exec.status", {"exec_id": exec_id})["pid"]
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(30) == 0
    assert group_members(pid) == []
    assert not os.path.exists(d.socket)
    d2 = start_daemon(base)
    try:
        status = d2.wire().call("exec.status", {"exec_id": exec_id})
        assert status["state"] == "cancelled", "its end was recorded: not lost"
    finally:
        d2.stop()


def test_only_the_newest_ended_execs_are_kept_and_never_a_running_one(base: Path) -> None:
    d = start_daemon(base, "--max-ended-execs", "3")
    try:
        w = d.wire()
        running = start(w, "echo up; sleep 1000")  # the oldest of all, and still running
        ended = []
        for n in range(5):
            exec_id = start(w, f"echo {n}")
            assert w.wait_done(exec_id)["state"] == "finished"
            ended.append(exec_id)
        # The prune runs once the end is recorded, the directories go just after the records:
        # wait for both rather than guess.
        dirs = [d.state / "execs" / gone for gone in ended[:2]]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
            len(w.call("exec.list")["execs"]) > 4 or any(p.exists() for p in dirs)
        ):
            time.sleep(0.05)
        listed = [s["exec_id"] for s in w.call("exec.list")["execs"]]
        assert sorted(listed) == sorted([running, *ended[2:]])
        for gone in ended[:2]:
            with pytest.raises(AgentError) as err:
                w.call("exec.status", {"exec_id": gone})
            assert err.value.code == "not_found"
        assert not any(p.exists() for p in dirs)
        assert output(w.read_all(ended[4])) == b"4\n"
        assert w.call("exec.status", {"exec_id": running})["state"] == "running"
    finally:
        d.stop()
    # At start too: the running exec was cancelled by the stop and counts as ended now.
    d2 = start_daemon(base, "--max-ended-execs", "2")
    try:
        listed = [s["exec_id"] for s in d2.wire().call("exec.list")["execs"]]
        assert sorted(listed) == sorted([ended[4], running])
        assert sorted(p.name for p in (d2.state / "execs").iterdir()) == sorted(listed)
    finally:
        d2.stop()
