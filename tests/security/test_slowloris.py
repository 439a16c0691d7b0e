"""Unauthenticated clients that open connections and never finish a request (slowloris) do not
stop the gateway from serving others, even with the 1 024 descriptors many hosts give a
process; and a connection that never finishes its request's head is closed."""

from __future__ import annotations

import contextlib
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from .gateway import AUTH, gateway

HALF_OPEN = 2000
# Far more than the server needs to answer; a server that cannot answer never does.
ANSWER_TIMEOUT = 30.0


@pytest.fixture
def descriptors_for_the_attack() -> Iterator[None]:
    """This process holds the attacker's sockets: it needs more than 2 000 descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = HALF_OPEN + 512
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"the attack needs {wanted} descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _attack(port: int, sockets: list[socket.socket]) -> None:
    """Opens HALF_OPEN connections, each stopped somewhere in a request: in its head, before
    any byte, or in a declared body."""
    stalls = [
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
        b"",
        b"POST /api/workspaces HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json"
        b"\r\ncontent-length: 100000\r\n\r\n{",
    ]
    for i in range(HALF_OPEN):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sockets.append(sock)
        # The server may already have closed this one to make room: that is its right.
        with contextlib.suppress(OSError):
            sock.sendall(stalls[i % len(stalls)])


@contextlib.contextmanager
def half_open(port: int) -> Iterator[list[socket.socket]]:
    sockets: list[socket.socket] = []
    try:
        _attack(port, sockets)
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


def test_the_gateway_answers_while_2000_half_open_connections_are_held(
    tmp_path: Path, descriptors_for_the_attack: None
) -> None:
    with gateway(tmp_path, max_descriptors=1024) as gw, half_open(gw.port):
        with httpx2.Client(timeout=ANSWER_TIMEOUT) as client:
            health = client.get(gw.url("/healthz"))
            listed = client.get(gw.url("/api/workspaces"), headers=AUTH)
            unauthenticated = client.get(gw.url("/api/workspaces"))

        assert health.status_code == 200, health.text
        assert listed.status_code == 200, listed.text
        assert listed.json()["workspaces"] == []
        assert unauthenticated.status_code == 401


def _closed_by_peer(sock: socket.socket, within: float) -> bytes | None:
    """What the peer sent before closing, or None if it kept the connection open."""
    sock.settimeout(1.0)
    received = b""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
    return None


def test_a_request_head_that_never_ends_is_answered_408_and_closed(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw, socket.create_connection(("127.0.0.1", gw.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")

        answer = _closed_by_peer(sock, within=ANSWER_TIMEOUT)

    assert answer is not None, "the server held a half-sent request open"
    assert answer.startswith(b"HTTP/1.1 408 ")


def test_a_request_head_larger_than_the_bound_is_refused(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw, socket.create_connection(("127.0.0.1", gw.port)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        header = b"X-Big: " + b"a" * 8192 + b"\r\n"
        with contextlib.suppress(OSError):  # the server may close while this still writes
            for _ in range(1024):  # 8 MiB of headers, far over any bound
                sock.sendall(header)

        answer = _closed_by_peer(sock, within=ANSWER_TIMEOUT)

    assert answer is not None, "the server kept reading headers without bound"
    # A close with unread bytes may reset the connection before the 431 is read: either will do.
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 "), answer[:100]
