"""Previews on the local driver with the real agent, through a served gateway: a workspace
declares ports at its create; an app it serves on one (the standard library's `http.server`,
and a small app that also speaks WebSocket) is reachable at the link `workspace_preview_url`
answers, by a client with no token, HTTP and WebSocket both, its relative links, redirects and
cookies kept under the link. Refused: no ticket, an altered, expired or foreign ticket (another
purpose, another deployment), a port the workspace did not declare (at the link, and with a
ticket made for it by the deployment's own key), and a WebSocket from another site."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest
from modal_workspace_core import _core
from modal_workspace_core.config import Settings, load_settings
from modal_workspace_core.operations import open_service
from modal_workspace_core.operations.machinery import tickets
from modal_workspace_core.surfaces.rest.app import create_app
from service_support import TOKEN, serving

APP = (Path(__file__).parent / "support" / "preview_app.py").read_text()
SITE = {
    "site/index.html": '<a href="sub/page.html">page</a> the index',
    "site/sub/page.html": "the sub page",
}


class Api:
    def __init__(self, base: str, client: httpx2.AsyncClient, settings: Settings) -> None:
        self.base, self.client, self.settings = base, client, settings

    async def workspace(self, ports: list[int]) -> str:
        made = await self.client.post("/api/workspaces", json={"ports": ports})
        assert made.status_code == 200, made.text
        assert made.json()["resources"]["ports"] == ports
        return str(made.json()["workspace_id"])

    async def write(self, ws: str, path: str, content: str) -> None:
        body = {"path": f"/workspace/{path}", "content": content}
        written = await self.client.put(f"/api/workspaces/{ws}/files/content", json=body)
        assert written.status_code == 200, written.text

    async def serve(self, ws: str, command: str) -> None:
        started = await self.client.post(
            f"/api/workspaces/{ws}/realtime-execs", json={"command": command}
        )
        assert started.status_code == 200, started.text

    async def preview(self, ws: str, port: int, **params: Any) -> httpx2.Response:
        return await self.client.get(
            f"/api/workspaces/{ws}/preview", params={"port": port, **params}
        )

    async def link(self, ws: str, port: int, **params: Any) -> dict[str, Any]:
        got = await self.preview(ws, port, **params)
        assert got.status_code == 200, got.text
        answer: dict[str, Any] = got.json()
        return answer


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    env = {"MODAL_WORKSPACE_MCP_TOKEN": TOKEN, "MODAL_WORKSPACE_JANITOR_SECONDS": "0"}
    settings = load_settings(env, data_root=tmp_path / "d")
    async with serving(create_app(open_service(settings), [TOKEN])) as url:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
            api = Api(url, client, settings)
            try:
                yield api
            finally:
                for listed in (await client.get("/api/workspaces")).json()["workspaces"]:
                    await client.delete(f"/api/workspaces/{listed['workspace_id']}")


@pytest.fixture
async def browser() -> AsyncIterator[httpx2.AsyncClient]:
    """A client with no token, as a person's browser is."""
    async with httpx2.AsyncClient(timeout=30) as client:
        yield client


@pytest.fixture
async def serving_app(api: Api) -> tuple[str, int]:
    """A workspace that declared 8000 and 8001, serving the test app on 8000 and the
    standard library's file server on 8001; both answer before this returns."""
    ws = await api.workspace([8000, 8001])
    await api.write(ws, "app.py", APP)
    for path, content in SITE.items():
        await api.write(ws, path, content)
    await api.serve(ws, "exec python3 /workspace/app.py 8000")
    await api.serve(ws, "cd /workspace/site && exec python3 -m http.server 8001 --bind 127.0.0.1")
    async with httpx2.AsyncClient(timeout=30) as client:
        for port in (8000, 8001):
            url = (await api.link(ws, port))["url"]
            async with asyncio.timeout(30):
                while (await client.get(url)).status_code != 200:
                    await asyncio.sleep(0.2)
    return ws, 8000


async def test_a_file_server_on_a_declared_port_is_reachable_through_its_preview_url(
    api: Api, serving_app: tuple[str, int], browser: httpx2.AsyncClient
) -> None:
    ws, _ = serving_app
    link = await api.link(ws, 8001)
    assert link["port"] == 8001
    assert link["url"] == api.base + link["path"]
    assert link["path"].startswith("/preview/") and link["path"].endswith("/")
    assert TOKEN not in link["url"]
    assert link["expires_at"] is not None

    index = await browser.get(link["url"])
    assert index.status_code == 200
    assert "the index" in index.text
    # The page's relative link, resolved as a browser resolves it, stays under the ticket.
    page = await browser.get(link["url"] + "sub/page.html")
    assert page.text == "the sub page"
    # The server's redirect of a directory to its slash (an absolute path) stays under it too.
    moved = await browser.get(link["url"] + "sub")
    assert moved.status_code == 301
    assert moved.headers["location"] == link["path"] + "sub/"
    assert index.headers["referrer-policy"] == "no-referrer"


async def test_requests_reach_the_app_as_if_it_were_opened_on_localhost(
    api: Api, serving_app: tuple[str, int], browser: httpx2.AsyncClient
) -> None:
    ws, port = serving_app
    link = await api.link(ws, port)
    got = await browser.get(
        link["url"] + "some/path?q=1",
        headers={"Authorization": "Bearer not-for-the-app", "Origin": api.base},
    )
    seen = got.json()
    assert seen["path"] == "/some/path?q=1"
    assert seen["Host"] == f"localhost:{port}"
    assert seen["Origin"] == f"http://localhost:{port}"
    assert seen["Authorization"] is None
    # Its cookie is kept to the link (no Domain, the path under the ticket); what would reach
    # past the link is not passed.
    assert got.headers["set-cookie"] == f"seen=1; HttpOnly; Path={link['path']}"
    assert "service-worker-allowed" not in got.headers
    # The browser's cookies for the link reach the app.
    again = await browser.get(link["url"], headers={"Cookie": "seen=1"})
    assert again.json()["Cookie"] == "seen=1"
    # A redirect to one of the app's own paths stays under the link.
    away = await browser.get(link["url"] + "away")
    assert (away.status_code, away.headers["location"]) == (302, link["path"] + "landed")
    # A body goes through, both ways.
    body = bytes(range(256)) * 4096
    posted = await browser.post(link["url"] + "echo", content=body)
    assert posted.content == body[::-1]


async def test_a_websocket_on_a_declared_port_echoes_through_the_preview(
    api: Api, serving_app: tuple[str, int]
) -> None:
    ws, port = serving_app
    link = await api.link(ws, port)
    url = "ws" + link["url"].removeprefix("http") + "socket?room=1"
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, protocols=("chat.v1",), origin=api.base) as socket,
    ):
        assert socket.protocol == "chat.v1"
        greeting = await socket.receive(timeout=10)
        assert greeting.data == "hello /socket?room=1 chat.v1"
        await socket.send_str("héllo")
        assert (await socket.receive(timeout=10)).data == "héllo"
        big = bytes(range(256)) * 1024
        await socket.send_bytes(big)
        assert (await socket.receive(timeout=10)).data == big
        await socket.close(code=4001)
    assert socket.close_code == 4001


async def test_a_websocket_from_another_site_or_without_a_valid_ticket_is_refused(
    api: Api, serving_app: tuple[str, int]
) -> None:
    ws, port = serving_app
    link = await api.link(ws, port)
    url = "ws" + link["url"].removeprefix("http") + "socket"
    altered = url.replace(link["path"], link["path"][:-3] + "AA/")
    async with aiohttp.ClientSession() as session:
        for target, origin in [
            (url, "https://elsewhere.example"),
            (altered, api.base),
            (api.base.replace("http", "ws") + "/preview/nope/socket", api.base),
        ]:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                async with session.ws_connect(target, origin=origin):
                    pass
            assert refused.value.status == 403, (target, origin)


async def test_a_preview_needs_a_live_ticket_of_its_own(
    api: Api, serving_app: tuple[str, int], browser: httpx2.AsyncClient
) -> None:
    ws, port = serving_app
    link = await api.link(ws, port)
    assert (await browser.get(link["url"])).status_code == 200
    # No ticket, or not one at all.
    assert (await browser.get(api.base + "/preview/")).status_code == 404
    assert (await browser.get(api.base + "/preview/not-a-ticket/")).status_code == 403
    # Altered.
    altered = link["url"][:-3] + "AA/"
    assert (await browser.get(altered)).status_code == 403
    # Foreign: this workspace and port, for another purpose (an experiment page's), or signed
    # by another deployment.
    for key, purpose in [
        (api.settings.ticket_secret, "experiment-page"),
        (b"k" * 32, "preview"),
    ]:
        value, _ = _core.mint_ticket(key, purpose, ws, str(port), int(time.time()), 600)
        refused = await browser.get(f"{api.base}/preview/{value}/")
        assert refused.status_code == 403, purpose
        assert "not valid" in refused.text
    # Expired: a link of one second, a little later.
    short = await api.link(ws, port, seconds=1)
    await asyncio.sleep(1.5)
    assert (await browser.get(short["url"])).status_code == 403


async def test_a_port_the_workspace_did_not_declare_is_refused(
    api: Api, serving_app: tuple[str, int], browser: httpx2.AsyncClient
) -> None:
    ws, _ = serving_app
    # Something listens on 8002 in the workspace, which it did not declare.
    await api.serve(ws, "exec python3 /workspace/app.py 8002")
    refused = await api.preview(ws, 8002)
    assert refused.status_code == 400
    assert refused.json()["error"]["field"] == "port"
    assert "8000, 8001" in refused.json()["error"]["message"]
    # Out of range: the core's rule, before the workspace is looked at.
    low = await api.preview(ws, 22)
    assert (low.status_code, low.json()["error"]["field"]) == (400, "port")
    # A ticket for it, made with the deployment's own key (which only the gateway holds),
    # opens nothing either: the port is checked against the workspace's record again.
    forged = tickets.mint(api.settings, "preview", ws, "8002")
    assert (await browser.get(f"{api.base}/preview/{forged.value}/")).status_code == 403


async def test_ports_are_checked_at_create(api: Api) -> None:
    for ports, said in [
        ([80], "[0]: a preview port is a TCP port from 1024 to 65535"),
        ([8000, 70000], "[1]: a preview port"),
        (list(range(8000, 8009)), "at most 8"),
    ]:
        made = await api.client.post("/api/workspaces", json={"ports": ports})
        assert made.status_code == 400, ports
        error = made.json()["error"]
        assert error["field"] == "ports", error
        assert said in error["message"], error
    assert (await api.client.get("/api/workspaces")).json()["workspaces"] == []


async def test_nothing_listening_is_a_page_that_says_so(
    api: Api, browser: httpx2.AsyncClient
) -> None:
    ws = await api.workspace([8500])
    link = await api.link(ws, 8500)
    got = await browser.get(link["url"])
    assert got.status_code == 502
    assert "Nothing answers on port 8500" in got.text


async def test_a_fork_keeps_the_ports_and_serves_its_own_preview(
    api: Api, browser: httpx2.AsyncClient
) -> None:
    ws = await api.workspace([8600])
    await api.write(ws, "site/index.html", "from the parent's files")
    forked = await api.client.post(f"/api/workspaces/{ws}/fork", json={})
    assert forked.status_code == 200, forked.text
    fork = forked.json()["workspace_id"]
    assert forked.json()["resources"]["ports"] == [8600]
    await api.serve(fork, "cd /workspace/site && exec python3 -m http.server 8600")
    link = await api.link(fork, 8600)
    async with asyncio.timeout(30):
        while (got := await browser.get(link["url"])).status_code != 200:
            await asyncio.sleep(0.2)
    assert "from the parent's files" in got.text
    # The parent serves nothing there: the fork's link reaches the fork alone.
    parent = await api.link(ws, 8600)
    assert (await browser.get(parent["url"])).status_code == 502


async def test_a_workspace_without_network_is_previewed_all_the_same(
    api: Api, browser: httpx2.AsyncClient
) -> None:
    # The relay needs no network: the agent reaches the port on the workspace's own loopback.
    made = await api.client.post("/api/workspaces", json={"ports": [8700], "block_network": True})
    assert made.status_code == 200, made.text
    ws = made.json()["workspace_id"]
    await api.write(ws, "site/index.html", "served offline")
    await api.serve(ws, "cd /workspace/site && exec python3 -m http.server 8700")
    link = await api.link(ws, 8700)
    async with asyncio.timeout(30):
        while (got := await browser.get(link["url"])).status_code != 200:
            await asyncio.sleep(0.2)
    assert got.text == "served offline"
