"""The HTTP server volume blocks move through, as Modal's block store: the URLs in
`VolumePutFiles2`'s missing blocks and `VolumeGetFile2`'s `get_urls` point here. It runs on
127.0.0.1 in the control plane's loop, started and stopped with it.

- `PUT /blocks/{token}/{sha256}` stores the body once its sha256 is the one the URL names (400
  otherwise; 413 past `BLOCK_SIZE`) and answers the receipt the SDK hands back as the block's
  `put_response`.
- `GET /blocks/{token}/{sha256}?offset=&len=&pad=` serves that slice of the block (404 for a
  block never uploaded), with a `Repr-Digest` the SDK checks; trailing zero bytes are left out
  unless `pad=1` (a client that does not pad blocks itself).

A URL without the plane's token is refused (403), so a stray client can neither read nor write.
Each request is counted in the plane's calls as `BlockPut` or `BlockGet`.
"""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING

from aiohttp import web

from .volume_store import BLOCK_SIZE

if TYPE_CHECKING:
    from .state import State

__all__ = ["BlockServer"]


class BlockServer:
    def __init__(self, state: State) -> None:
        self.state = state
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        """Serve on a free loopback port; returns the base URL."""
        app = web.Application(client_max_size=BLOCK_SIZE)
        app.router.add_put("/blocks/{token}/{digest}", self._put)
        app.router.add_get("/blocks/{token}/{digest}", self._get)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        return f"http://{host}:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _digest(self, request: web.Request) -> bytes:
        if request.match_info["token"] != self.state.volumes.token:
            raise web.HTTPForbidden(text="not a block URL of this control plane")
        try:
            digest = bytes.fromhex(request.match_info["digest"])
        except ValueError:
            digest = b""
        if len(digest) != 32:
            raise web.HTTPBadRequest(text="the URL names no sha256 digest")
        return digest

    async def _put(self, request: web.Request) -> web.Response:
        self.state.calls["BlockPut"] += 1
        digest = self._digest(request)
        body = await request.read()  # 413 past client_max_size
        if hashlib.sha256(body).digest() != digest:
            raise web.HTTPBadRequest(text="the body's sha256 is not the one the URL names")
        self.state.volumes.blocks[digest] = body
        return web.Response(body=self.state.volumes.receipt(digest))

    async def _get(self, request: web.Request) -> web.Response:
        self.state.calls["BlockGet"] += 1
        digest = self._digest(request)
        data = self.state.volumes.blocks.get(digest)
        if data is None:
            raise web.HTTPNotFound(text="no such block")
        try:
            offset = int(request.query.get("offset", "0"))
            length = int(request.query.get("len", str(BLOCK_SIZE)))
            pad = request.query.get("pad", "0") == "1"
        except ValueError as exc:
            raise web.HTTPBadRequest(text="offset and len are integers") from exc
        body = data[offset : offset + length]
        if pad:
            body = body.ljust(length, b"\0")
        digest_header = base64.b64encode(hashlib.sha256(body).digest()).decode()
        return web.Response(body=body, headers={"Repr-Digest": f"sha-256=:{digest_header}:"})
