"""The baselines of the agent benchmark: plain single-process Python servers that pipe one
subprocess's stdout to a waiting reader, with no agent, no log on disk and no channel.

`python bench/baseline_pipe.py unix SOCKET -- ARGV…` streams the child's stdout to the first
client of a unix socket, chunk by chunk, as asyncio reads it. `python bench/baseline_pipe.py rest
PORT -- ARGV…` serves `GET /events?cursor=N&wait_seconds=S` (a cursor long-poll returning
`{"events":[{"seq","data"}],"next_cursor","done"}`) with FastAPI on uvicorn at 127.0.0.1:PORT,
the same HTTP stack as the gateway. `… stdlib PORT -- ARGV…` serves the same long-poll from the
standard library alone (`http.server`, a thread per connection, a thread reading the pipe).
Each starts the child when the first reader arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
        return page(self.chunks, cursor, self.done)


def page(chunks: list[str], cursor: int, done: bool) -> dict[str, Any]:
    """The chunks after `cursor` (chunk `seq` N is `chunks[N - 1]`): what both REST modes send."""
    events = [{"seq": i + 1, "data": d} for i, d in enumerate(chunks[cursor:], cursor)]
    return {"events": events, "next_cursor": cursor + len(events), "done": done}


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


class ThreadStream:
    """`Stream` for threads: a thread reads the child's pipe, long-polls wait on a condition."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.chunks: list[str] = []
        self.done = False
        self.changed = threading.Condition()
        self.started = False

    def start_once(self) -> None:
        with self.changed:
            if self.started:
                return
            self.started = True
        threading.Thread(target=self.follow, daemon=True).start()

    def follow(self) -> None:
        child = subprocess.Popen(self.argv, stdout=subprocess.PIPE)
        assert child.stdout is not None
        fd = child.stdout.fileno()
        while data := os.read(fd, 65536):
            with self.changed:
                self.chunks.append(data.decode(errors="replace"))
                self.changed.notify_all()
        child.wait()
        with self.changed:
            self.done = True
            self.changed.notify_all()

    def wait_page(self, cursor: int, wait_seconds: float) -> dict[str, Any]:
        with self.changed:
            self.changed.wait_for(lambda: len(self.chunks) > cursor or self.done, wait_seconds)
            return page(self.chunks, cursor, self.done)


def stdlib_handler(stream: ThreadStream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the client expects
        disable_nagle_algorithm = True
        wbufsize = 65536  # the head and the body leave in one write, when the handler returns

        def do_GET(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/healthz":
                self.answer({"ok": True})
            elif url.path == "/events":
                query = urllib.parse.parse_qs(url.query)
                cursor = int(query.get("cursor", ["0"])[0])
                wait_seconds = float(query.get("wait_seconds", ["0"])[0])
                stream.start_once()
                self.answer(stream.wait_page(cursor, wait_seconds))
            else:
                self.send_error(404)

        def answer(self, body: Any) -> None:
            encoded = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(encoded)))
            self.end_headers()
            self.wfile.write(encoded)

        def log_message(self, *args: Any) -> None:
            pass  # no access log: the bare floor of a Python HTTP long-poll

    return Handler


class ManyClientsServer(ThreadingHTTPServer):
    # Hundreds of long-pollers connect at once (bench/poller_bench.py): the listen backlog of
    # 5 would leave most of them retrying their connect for a second.
    request_queue_size = 4096


def serve_stdlib(port: int, argv: list[str]) -> None:
    # A descriptor per poller: lift the soft limit of 1024 to the hard one, as the gateway does.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    server = ManyClientsServer(("127.0.0.1", port), stdlib_handler(ThreadStream(argv)))
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


def main() -> None:
    mode, where, sep, *argv = sys.argv[1:]
    if sep != "--" or not argv:
        raise SystemExit("usage: baseline_pipe.py unix SOCKET|rest PORT|stdlib PORT -- ARGV…")
    if mode == "unix":
        asyncio.run(serve_unix(where, argv))
    elif mode == "rest":
        import uvicorn

        uvicorn.run(rest_app(argv), host="127.0.0.1", port=int(where), log_level="info")
    elif mode == "stdlib":
        serve_stdlib(int(where), argv)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
