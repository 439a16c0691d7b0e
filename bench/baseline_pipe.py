"""The baselines of the agent benchmark: plain single-process Python servers that pipe one
subprocess's stdout to a waiting reader, with no agent, no log on disk and no channel.

`python bench/baseline_pipe.py unix SOCKET -- ARGV…` streams the child's stdout to the first
client of a unix socket, chunk by chunk, as asyncio reads it. `python bench/baseline_pipe.py rest
PORT -- ARGV…` serves `GET /events?cursor=N&wait_seconds=S` (a cursor long-poll returning
`{"events":[{"seq","data"}],"next_cursor","done"}`) with FastAPI on uvicorn at 127.0.0.1:PORT,
the same HTTP stack as the gateway. Both start the child when the first reader arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import Any


async def serve_unix(path: str, argv: list[str]) -> None:
    finished = asyncio.Event()

    async def pipe(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        child = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
        assert child.stdout is not None
        while data := await child.stdout.read(65536):
            writer.write(data)
            await writer.drain()
        await child.wait()
        writer.close()
        finished.set()

    server = await asyncio.start_unix_server(pipe, path)
    async with server:
        await finished.wait()


class Stream:
    """The child's output chunks, numbered from 1, with one condition long-polls wait on."""

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.done = False
        self.changed = asyncio.Condition()

    async def follow(self, argv: list[str]) -> None:
        child = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
        assert child.stdout is not None
        while data := await child.stdout.read(65536):
            async with self.changed:
                self.chunks.append(data.decode(errors="replace"))
                self.changed.notify_all()
        await child.wait()
        async with self.changed:
            self.done = True
            self.changed.notify_all()

    def page(self, cursor: int) -> dict[str, Any]:
        events = [{"seq": i + 1, "data": d} for i, d in enumerate(self.chunks[cursor:], cursor)]
        next_cursor = cursor + len(events)
        return {"events": events, "next_cursor": next_cursor, "done": self.done}


def rest_app(argv: list[str]) -> Any:
    from fastapi import FastAPI

    app = FastAPI()
    stream = Stream()
    tasks: set[asyncio.Task[None]] = set()

    @app.get("/events")
    async def events(cursor: int = 0, wait_seconds: float = 0.0) -> dict[str, Any]:
        if not tasks:
            tasks.add(asyncio.create_task(stream.follow(argv)))
        async with stream.changed:
            if len(stream.chunks) <= cursor and not stream.done:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stream.changed.wait(), wait_seconds)
            return stream.page(cursor)

    return app


def main() -> None:
    mode, where, sep, *argv = sys.argv[1:]
    if sep != "--" or not argv:
        raise SystemExit("usage: baseline_pipe.py unix SOCKET|rest PORT -- ARGV…")
    if mode == "unix":
        asyncio.run(serve_unix(where, argv))
    elif mode == "rest":
        import uvicorn

        uvicorn.run(rest_app(argv), host="127.0.0.1", port=int(where), log_level="info")
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
