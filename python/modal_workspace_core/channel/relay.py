"""A relay to a port inside a workspace (docs/protocol.md, "Relays"): a connection of its own to
the agent's socket, its Hellos and one `port.connect`, after which it carries the bytes of one
TCP connection to that port on the workspace's loopback. The agent opens the connection from
inside the workspace, so nothing is reached that the workspace's own processes could not.

The frames before the switch are read one by one, exactly (a length, then that many bytes), so
no byte of the app's that follows the agent's answer is taken for a frame: the stream returned
starts with the app's first byte.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct

from .._core import AgentChannel
from ..errors import AgentError
from .transports import PeerCheck

__all__ = ["open_relay"]

# How long the agent has to say Hello and answer `port.connect` (its own connect to the port
# waits up to 10 s).
_OPEN_SECONDS = 15.0
# The frames before the switch are small (a Hello, an answer): anything larger is not the agent.
_MAX_FRAME_BYTES = 64 * 1024
_LENGTH = struct.Struct(">I")


async def open_relay(
    path: str | os.PathLike[str],
    port: int,
    *,
    check: PeerCheck | None = None,
    key: str | None = None,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A byte stream to `port` on the workspace's loopback, through the agent listening at
    `path` (`check` vets it, `key` proves the gateway to it). Raises AgentError with the
    agent's refusal (`unavailable`: nothing listens on the port), or OSError when the agent
    cannot be reached."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await loop.sock_connect(sock, os.fspath(path))
        if check is not None:
            check(sock)
        reader, writer = await asyncio.open_unix_connection(sock=sock)
    except BaseException:
        sock.close()
        raise
    try:
        async with asyncio.timeout(_OPEN_SECONDS):
            await _switch(reader, writer, port, key)
    except BaseException as exc:
        writer.close()
        if isinstance(exc, TimeoutError):
            raise AgentError("timeout", "the agent did not open the relay in time") from None
        raise
    return reader, writer


async def _switch(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int, key: str | None
) -> None:
    # The channel's own rules for the Hellos and the request (the key, the versions); it never
    # sees a byte past the answer.
    channel = AgentChannel(key=key)
    writer.write(channel.take_outgoing())
    _, answers, _ = channel.feed(await _frame(reader))
    _refused(answers)
    request = channel.request("port.connect", {"port": port})
    writer.write(channel.take_outgoing())
    await writer.drain()
    while True:
        _, answers, _ = channel.feed(await _frame(reader))
        _refused(answers)
        if any(answer[0] == request for answer in answers):
            return


def _refused(answers: list[tuple[int, bool, str, bytes]]) -> None:
    for _, ok, body, _ in answers:
        if not ok:
            raise AgentError.from_body(body)


async def _frame(reader: asyncio.StreamReader) -> bytes:
    """One whole frame (`len | kind | …`, `len` counting what follows the kind byte)."""
    try:
        head = await reader.readexactly(_LENGTH.size + 1)
        (length,) = _LENGTH.unpack_from(head)
        if length > _MAX_FRAME_BYTES:
            raise AgentError("internal", "the agent's answer is not a relay's")
        return head + await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise AgentError(
            "unavailable", "the agent closed the connection before it opened the relay"
        ) from None
