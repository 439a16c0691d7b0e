"""A tiny test-only client of the agent channel protocol (docs/protocol.md) over a unix socket or
the pipes of a `connect` process: frames, requests, subscriptions and credit, nothing more."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HELLO, REQUEST, RESPONSE, EVENTS, CREDIT = 1, 2, 3, 4, 5


class AgentError(Exception):
    """An error response: `code` is the protocol's error code."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code: str = error.get("code", "")
        self.message: str = error.get("message", "")
        self.field: str | None = error.get("field")


def encode(kind: int, header: dict[str, Any], payload: bytes = b"") -> bytes:
    head = json.dumps(header, separators=(",", ":")).encode()
    body = struct.pack(">I", len(head)) + head + payload
    return struct.pack(">IB", len(body), kind) + body


@dataclass
class Frame:
    kind: int
    header: dict[str, Any]
    payload: bytes
    at: float = 0.0


@dataclass
class Wire:
    """One channel. `read_fd`/`write_fd` are the byte stream; frames that are not the awaited
    response are kept: pages per stream in `pages`, responses by id in `responses`."""

    read_fd: int
    write_fd: int
    closer: Any = None
    buf: bytearray = field(default_factory=bytearray)
    next_id: int = 1
    responses: dict[int, Frame] = field(default_factory=dict)
    pages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    arrivals: dict[str, list[float]] = field(default_factory=dict)
    peer_hello: dict[str, Any] | None = None
    eof: bool = False

    # --- transports ---------------------------------------------------------------------------
    @classmethod
    def unix(cls, path: str, hello: bool = True) -> Wire:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        sock.setblocking(False)
        wire = cls(sock.fileno(), sock.fileno(), closer=sock)
        if hello:
            wire.hello()
        return wire

    @classmethod
    def process(cls, proc: subprocess.Popen[bytes], hello: bool = True) -> Wire:
        assert proc.stdin is not None and proc.stdout is not None
        for fd in (proc.stdin.fileno(), proc.stdout.fileno()):
            os.set_blocking(fd, False)
        wire = cls(proc.stdout.fileno(), proc.stdin.fileno(), closer=proc)
        if hello:
            wire.hello()
        return wire

    def close(self) -> None:
        if isinstance(self.closer, socket.socket):
            self.closer.close()

    # --- bytes --------------------------------------------------------------------------------
    def _pump(self, timeout: float, out: memoryview | None = None) -> int:
        """Waits up to `timeout` for input (and room to write `out`); reads what is there.
        Returns how many bytes of `out` were written."""
        writers = [self.write_fd] if out is not None and len(out) else []
        readable, writable, _ = select.select([self.read_fd], writers, [], timeout)
        written = 0
        if writable and out is not None:
            try:
                written = os.write(self.write_fd, out[: 1 << 20])
            except BlockingIOError:
                written = 0
        if readable:
            try:
                data = os.read(self.read_fd, 1 << 20)
            except BlockingIOError:
                return written
            if not data:
                self.eof = True
            self.buf += data
        return written

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        while len(view):
            view = view[self._pump(5.0, view) :]

    def _take(self) -> Frame | None:
        if len(self.buf) < 5:
            return None
        length, kind = struct.unpack_from(">IB", self.buf)
        if len(self.buf) < 5 + length:
            return None
        (head_len,) = struct.unpack_from(">I", self.buf, 5)
        header = json.loads(bytes(self.buf[9 : 9 + head_len]))
        payload = bytes(self.buf[9 + head_len : 5 + length])
        del self.buf[: 5 + length]
        return Frame(kind, header, payload, time.monotonic())

    def frame(self, timeout: float = 60.0) -> Frame:
        """The next frame, filed away as well (pages and responses)."""
        deadline = time.monotonic() + timeout
        while True:
            got = self._take()
            if got is not None:
                self._file(got)
                return got
            if self.eof:
                raise EOFError("the agent closed the channel")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame from the agent in time")
            self._pump(min(left, 1.0))

    def _file(self, f: Frame) -> None:
        if f.kind == EVENTS:
            stream = f.header["stream"]
            self.pages.setdefault(stream, []).append(json.loads(f.payload))
            self.arrivals.setdefault(stream, []).append(f.at)
        elif f.kind == RESPONSE:
            self.responses[f.header["id"]] = f
        elif f.kind == HELLO:
            self.peer_hello = f.header

    # --- protocol -----------------------------------------------------------------------------
    def hello(self, protocol: int = 1) -> dict[str, Any]:
        self.send(encode(HELLO, {"protocol": protocol, "build": "test", "role": "gateway"}))
        while self.peer_hello is None:
            self.frame()
        return self.peer_hello

    def submit(self, op: str, args: dict[str, Any] | None = None, payload: bytes = b"") -> int:
        rid = self.next_id
        self.next_id += 1
        self.send(encode(REQUEST, {"id": rid, "op": op, "args": args or {}}, payload))
        return rid

    def response(self, rid: int, timeout: float = 60.0) -> tuple[dict[str, Any], bytes]:
        deadline = time.monotonic() + timeout
        while rid not in self.responses:
            self.frame(max(0.01, deadline - time.monotonic()))
        f = self.responses.pop(rid)
        if not f.header["ok"]:
            raise AgentError(f.header["error"])
        return f.header["result"], f.payload

    def call(
        self, op: str, args: dict[str, Any] | None = None, payload: bytes = b"", timeout: float = 60
    ) -> dict[str, Any]:
        return self.response(self.submit(op, args, payload), timeout)[0]

    def credit(self, stream: str, nbytes: int) -> None:
        self.send(encode(CREDIT, {"stream": stream, "bytes": nbytes}))

    def read_page(self, exec_id: str, cursor: int, **kw: Any) -> dict[str, Any]:
        _, payload = self.response(
            self.submit("exec.read", {"exec_id": exec_id, "cursor": cursor, **kw})
        )
        page: dict[str, Any] = json.loads(payload)
        return page

    def read_all(self, exec_id: str, cursor: int = 0) -> list[dict[str, Any]]:
        """Every retained event after `cursor` through `exec.read`, checking the page contract."""
        events: list[dict[str, Any]] = []
        while True:
            page = self.read_page(exec_id, cursor)
            events.extend(page["events"])
            if not page["has_more"]:
                return events
            assert page["next_cursor"] > cursor
            cursor = page["next_cursor"]

    def wait_done(self, exec_id: str, timeout: float = 60.0) -> dict[str, Any]:
        """Polls the status (with long-polls on the log) until the exec has ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.call("exec.status", {"exec_id": exec_id})
            if status["state"] not in ("starting", "running"):
                return status
            self.read_page(exec_id, status["last_seq"], wait_seconds=1.0)
        raise TimeoutError(f"{exec_id} did not end in {timeout} s")


def output(events: list[dict[str, Any]], kind: str = "stdout") -> bytes:
    """The bytes of one output stream, text and `data_b64` events alike."""
    out = bytearray()
    for e in events:
        if e["type"] == kind:
            out += e["data"].encode() if "data" in e else base64.b64decode(e["data_b64"])
    return bytes(out)


# --- a daemon for one test -----------------------------------------------------------------

AGENT = [sys.executable, "-m", "modal_workspace_core.agent"]


@dataclass
class Daemon:
    """A daemon process started by a test, and where it lives."""

    base: Path
    root: Path
    state: Path
    socket: str
    proc: subprocess.Popen[bytes]
    args: list[str]

    def wire(self) -> Wire:
        return Wire.unix(self.socket)

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


def start_daemon(base: Path, *extra: str, env: dict[str, str] | None = None) -> Daemon:
    """A daemon for `base`, with `extra` options, in this process's environment or `env`."""
    root, state = base / "ws", base / "state"
    root.mkdir(exist_ok=True)
    sock = str(base / "agent.sock")
    args = ["daemon", "--root", str(root), "--state-dir", str(state), "--socket", sock, *extra]
    log = open(base / "daemon.log", "ab")  # noqa: SIM115 - the process owns it
    proc = subprocess.Popen([*AGENT, *args], stderr=log, stdout=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise AssertionError((base / "daemon.log").read_text())
        assert time.monotonic() < deadline, "the daemon did not start listening"
        # A socket file left by a killed daemon exists before the new one listens: connect.
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(sock)
            break
        except OSError:
            time.sleep(0.02)
        finally:
            probe.close()
    return Daemon(base, root, state, sock, proc, args)


def temp_base() -> Iterator[Path]:
    """A fresh directory for one daemon, removed afterwards. Short, because a unix socket path
    must fit in 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="mwc-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
