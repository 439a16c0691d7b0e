"""A stand-in for the workspace agent in driver tests: the same command line and the same byte
path (`connect` copies stdin/stdout to the daemon's unix socket), but the daemon echoes every byte
back instead of speaking the protocol. It proves the channel's plumbing, not the agent.

Usage: echo_agent.py daemon --root DIR --state-dir DIR --socket PATH
       echo_agent.py connect --socket PATH
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


async def daemon(socket: Path, state_dir: Path) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    socket.parent.mkdir(parents=True, exist_ok=True)
    socket.unlink(missing_ok=True)
    server = await asyncio.start_unix_server(_echo, path=str(socket))
    (state_dir / "daemon.pid").write_text(str(os.getpid()))
    async with server:
        await server.serve_forever()


async def connect(socket: Path) -> None:
    for _ in range(200):  # the daemon may still be starting
        try:
            reader, writer = await asyncio.open_unix_connection(str(socket))
            break
        except OSError:
            await asyncio.sleep(0.05)
    else:
        sys.exit("echo agent: the daemon's socket never appeared")
    loop = asyncio.get_running_loop()

    async def upstream() -> None:
        while data := await loop.run_in_executor(None, os.read, 0, 65536):
            writer.write(data)
            await writer.drain()
        writer.write_eof()

    async def downstream() -> None:
        while data := await reader.read(65536):
            os.write(1, data)

    sending = asyncio.create_task(upstream())
    await downstream()
    sending.cancel()
    # The stdin reader thread may still block in read(); the daemon hung up, so leave now.
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["daemon", "connect"])
    parser.add_argument("--root")
    parser.add_argument("--state-dir", default="/tmp")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--config")  # the launch configuration on stdin, which echoing ignores
    parser.add_argument("--redact-env")  # the variables the agent redacts: nothing to redact
    args = parser.parse_args()
    if args.mode == "daemon":
        asyncio.run(daemon(Path(args.socket), Path(args.state_dir)))
    else:
        asyncio.run(connect(Path(args.socket)))


if __name__ == "__main__":
    main()
