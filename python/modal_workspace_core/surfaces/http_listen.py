"""The gateway's listening sockets, bound before anything else is said or done: a port that is
taken is one clear error, not a banner and a fresh token followed by uvicorn's own failure.
"""

from __future__ import annotations

import errno
import socket

__all__ = ["ListenError", "listen"]

# uvicorn's default: how many connections the kernel queues before the loop accepts them.
_BACKLOG = 2048


class ListenError(Exception):
    """The address cannot be listened on; the message says why and what to do."""


def listen(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for every address `host` names (`localhost` is IPv4 and IPv6), as
    asyncio's `create_server` would bind them; all or none."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {shown}: {exc.strerror}: check --host") from None
    bound: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in infos:
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            # A server restarted at once must not wait for the old one's TIME_WAIT to pass.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                # `localhost` binds ::1 and 127.0.0.1 apart, as asyncio does.
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(_BACKLOG)
    except OSError as exc:
        for sock in bound:
            sock.close()
        raise ListenError(f"cannot listen on {shown}: {_why(exc)}") from None
    return bound


def _why(exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            "the port is already in use (is another server running?): stop that server or "
            "choose another port with --port"
        )
    if exc.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privilege): choose another with --port"
    if exc.errno == errno.EADDRNOTAVAIL:
        return "no interface of this machine has that address: check --host"
    return exc.strerror or str(exc)
