"""How `modal-workspace serve` stops on SIGINT or SIGTERM: the long-polls its clients hold open
are answered at once with what they have, and a request still running a moment later is
answered 503 "try again", so a stop takes a second or two rather than a client's 25 s wait.

uvicorn alone stops accepting, then waits for every request in flight to finish, for as long as
that takes (or, given a timeout, cancels them and logs each as a crash with a 500).
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["GRACE_SECONDS", "StoppingServer", "Unfinished"]

# How long the requests in flight at a stop have to finish once their waits were ended: a page
# read or a file operation takes milliseconds; what runs longer (a command run to its end, a
# clone) is answered 503 and the client retries against the next server.
GRACE_SECONDS = 2

_SHUTTING_DOWN = json.dumps(
    {"error": {"code": "upstream", "message": "the gateway is shutting down: try again"}}
).encode()


class Unfinished:
    """ASGI middleware: a request that the stopping server cancels before its response began
    gets a 503 in the error model (with `Retry-After`) instead of uvicorn's 500."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.stopping = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def noting_start(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, noting_start)
        except asyncio.CancelledError:
            if started or not self.stopping:
                raise
            # The cancellation was the server's: this task ends here, with its answer.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(_SHUTTING_DOWN)).encode()),
                        (b"retry-after", b"1"),
                        (b"connection", b"close"),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": _SHUTTING_DOWN})


class StoppingServer(uvicorn.Server):
    """uvicorn's server, which first calls `on_stop` (ending the long-polls) when it stops,
    then gives the requests in flight `GRACE_SECONDS` before `unfinished` answers them."""

    def __init__(
        self, config: uvicorn.Config, unfinished: Unfinished, on_stop: Callable[[], None]
    ) -> None:
        config.timeout_graceful_shutdown = GRACE_SECONDS
        super().__init__(config)
        self._unfinished = unfinished
        self._on_stop = on_stop

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._unfinished.stopping = True
        self._on_stop()
        await super().shutdown(sockets)
