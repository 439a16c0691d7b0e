"""Previews on the local driver with the real agent, through a served gateway: a workspace
declares ports at its create; an app it serves on one (the standard library's `http.server`,
and a small app that also speaks WebSocket) is reachable at the link `workspace_preview_url`
answers, on a host name of its own (`p-<id>-<port>.localhost` on a loopback gateway), by a
client with no token, HTTP and WebSocket both, its relative links, redirects and cookies kept
under the link. Refused: no ticket, an altered, expired or foreign ticket (another purpose,
another deployment), a port the workspace did not declare (at the link, and with a ticket made
for it by the deployment's own key), a WebSocket from any other origin (the gateway's, another
preview's, another site's), a ticket on another preview's host name, every gateway route on a
preview's host name and every preview route on the gateway's.

Browsers resolve every `*.localhost` name to loopback themselves; the C library here may not,
so the clients below do as browsers do (`LocalhostNames`, `LocalhostResolver`)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx2
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from modal_workspace_core import _core
from modal_workspace_core.config import ConfigError, Settings, load_settings
from modal_workspace_core.config.gateway import preview_zone
from modal_workspace_core.operations import open_service
from modal_workspace_core.operations.machinery import tickets
from modal_workspace_core.surfaces.rest.app import create_app
from service_support import TOKEN, serving

APP = (Path(__file__).parent / "support" / "preview_app.py").read_text()
SITE = {
    "site/index.html": '<a href="sub/page.html">page</a> the index',
    "site/sub/page.html": "the sub page",
}


class LocalhostNames(httpx2.AsyncHTTPTransport):
    """Connects to 127.0.0.1 for every `*.localhost` name, as a browser does; the `Host` header
    keeps the name."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if (request.url.host or "").endswith(".localhost"):
            request.url = request.url.copy_with(host="127.0.0.1")
        return await super().handle_async_request(request)


class LocalhostResolver(AbstractResolver):
    """aiohttp's resolver, likewise."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        assert host.endswith(".localhost") or host == "127.0.0.1", host
        return [
            {
                "hostname": host,
                "host": "127.0.0.1",
                "port": port,
                "family": socket.AF_INET,
                "proto": 0,
                "flags": socket.AI_NUMERICHOST,
            }
        ]

    async def close(self) -> None:
        pass


def browser_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=LocalhostResolver()))


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


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


@contextlib.asynccontextmanager
async def gateway(tmp_path: Path, host: str = "127.0.0.1", **env: str) -> AsyncIterator[Api]:
    """A gateway served on 127.0.0.1, told it listens on `host` (what its default preview
    host is decided by)."""
    env = {"MODAL_WORKSPACE_MCP_TOKEN": TOKEN, "MODAL_WORKSPACE_JANITOR_SECONDS": "0", **env}
    settings = load_settings(env, data_root=tmp_path / "d")
    async with serving(create_app(open_service(settings), [TOKEN], host=host)) as url:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
            api = Api(url, client, settings)
            try:
                yield api
            finally:
                for listed in (await client.get("/api/workspaces")).json()["workspaces"]:
                    await client.delete(f"/api/workspaces/{listed['workspace_id']}")


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with gateway(tmp_path) as api:
        yield api


@pytest.fixture
async def browser() -> AsyncIterator[httpx2.AsyncClient]:
    """A client with no token, as a person's browser is."""
    async with httpx2.AsyncClient(timeout=30, transport=LocalhostNames()) as client:
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
    async with httpx2.AsyncClient(timeout=30, transport=LocalhostNames()) as client:
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
    # On a host name of its own: the workspace's id and the port, under localhost (a loopback
    # gateway's default), at the gateway's port.
    gateway_port = urlsplit(api.base).port
    assert link["url"] == f"http://p-{ws[3:]}-8001.localhost:{gateway_port}" + link["path"]
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
        headers={"Authorization": "Bearer not-for-the-app", "Origin": origin_of(link["url"])},
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
        browser_session() as session,
        session.ws_connect(url, protocols=("chat.v1",), origin=origin_of(url)) as socket,
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


async def test_a_websocket_from_another_origin_or_without_a_valid_ticket_is_refused(
    api: Api, serving_app: tuple[str, int]
) -> None:
    ws, port = serving_app
    link = await api.link(ws, port)
    own = origin_of(link["url"])
    other_preview = origin_of((await api.link(ws, 8001))["url"])
    url = "ws" + link["url"].removeprefix("http") + "socket"
    altered = url.replace(link["path"], link["path"][:-3] + "AA/")
    on_gateway = api.base.replace("http", "ws") + link["path"] + "socket"
    async with browser_session() as session:
        for target, origin in [
            # Pages of any origin but the preview's own: another site, the gateway's, another
            # preview's (the same workspace's other port).
            (url, "https://elsewhere.example"),
            (url, api.base),
            (url, other_preview),
            (url, "http://x." + urlsplit(own).netloc),
            (altered, own),
            (url.replace(link["path"], "/preview/nope/"), own),
            # The gateway's host name serves no preview at all.
            (on_gateway, api.base),
        ]:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                async with session.ws_connect(target, origin=origin):
                    pass
            assert refused.value.status in (403, 404), (target, origin)
        # From its own origin, the same socket opens.
        async with session.ws_connect(url, origin=own) as socket:
            assert (await socket.receive(timeout=10)).data.startswith("hello /socket")


async def test_a_preview_needs_a_live_ticket_of_its_own(
    api: Api, serving_app: tuple[str, int], browser: httpx2.AsyncClient
) -> None:
    ws, port = serving_app
    link = await api.link(ws, port)
    assert (await browser.get(link["url"])).status_code == 200
    own = origin_of(link["url"])
    # No ticket, or not one at all.
    assert (await browser.get(own + "/preview/")).status_code == 404
    assert (await browser.get(own + "/preview/not-a-ticket/")).status_code == 403
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
        refused = await browser.get(f"{own}/preview/{value}/")
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
    named = origin_of((await api.link(ws, 8000))["url"]).replace("-8000.", "-8002.")
    assert (await browser.get(f"{named}/preview/{forged.value}/")).status_code == 403


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


async def test_a_preview_host_name_serves_the_preview_routes_alone(
    api: Api, serving_app: tuple[str, int], browser: httpx2.AsyncClient
) -> None:
    ws, port = serving_app
    link = await api.link(ws, port)
    own = origin_of(link["url"])
    assert (await browser.get(link["url"])).status_code == 200
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    # Nothing of the gateway's answers on a preview's name, not even with the token: its pages
    # (the OAuth consent page above all), its API, MCP, its schema, its health.
    for method, path in [
        ("GET", "/"),
        ("GET", "/healthz"),
        ("GET", "/api/workspaces"),
        ("GET", f"/api/workspaces/{ws}/preview?port={port}"),
        ("POST", "/mcp/"),
        ("POST", "/mcp"),
        ("GET", "/oauth/consent"),
        ("GET", "/authorize"),
        ("GET", "/.well-known/oauth-authorization-server"),
        ("GET", "/action-openapi.json"),
        ("GET", "/openapi.json"),
        ("GET", "/pages/assets/experiment-page.js"),
    ]:
        got = await browser.request(method, own + path, headers=bearer)
        assert got.status_code == 404, (method, path, got.text)
        assert "workspaces" not in got.text
    # Another name under the zone, which no preview has, serves nothing either.
    for name in [
        "www.localhost",
        f"p-{ws[3:]}-0{port}.localhost",
        f"x.p-{ws[3:]}-{port}.localhost",
        f"p-{ws[3:]}-{port}0.localhost",
    ]:
        netloc = f"{name}:{urlsplit(api.base).port}"
        got = await browser.get(f"http://{netloc}{link['path']}")
        assert got.status_code == 404, name
        got = await browser.get(f"http://{netloc}/healthz")
        assert got.status_code == 404, name
    # And the gateway's own name serves no preview, with the same ticket.
    got = await browser.get(api.base + link["path"])
    assert got.status_code == 404
    assert "the index" not in got.text and "path" not in got.json().get("error", {})
    assert (await browser.get(api.base + "/healthz")).status_code == 200


async def test_a_ticket_opens_nothing_on_another_previews_host_name(
    api: Api, serving_app: tuple[str, int], browser: httpx2.AsyncClient
) -> None:
    ws, port = serving_app
    other = await api.workspace([port])
    link = await api.link(ws, port)
    own = origin_of(link["url"])
    assert (await browser.get(link["url"])).status_code == 200
    for name in [
        own.replace(f"-{port}.", "-8001."),  # the same workspace's other port
        own.replace(ws[3:], other[3:]),  # another workspace, the same port
    ]:
        got = await browser.get(name + link["path"])
        assert got.status_code == 403, name
        assert "not valid" in got.text
    # Each name opens with its own ticket.
    theirs = await api.link(other, port)
    assert origin_of(theirs["url"]) == own.replace(ws[3:], other[3:])
    assert (await browser.get(own + theirs["path"])).status_code == 403


async def test_a_gateway_off_loopback_makes_no_preview_link_without_a_preview_host(
    tmp_path: Path, browser: httpx2.AsyncClient
) -> None:
    async with gateway(tmp_path / "a", host="0.0.0.0") as api:
        ws = await api.workspace([8000])
        refused = await api.preview(ws, 8000)
        assert refused.status_code == 403, refused.text
        assert "MODAL_WORKSPACE_PREVIEW_HOST" in refused.json()["error"]["message"]
        # Nor does any `*.localhost` name reach a preview there.
        link_path = "/preview/" + tickets.mint(api.settings, "preview", ws, "8000").value + "/"
        named = f"http://p-{ws[3:]}-8000.localhost:{urlsplit(api.base).port}"
        assert (await browser.get(named + link_path)).status_code == 404
    zone = {"MODAL_WORKSPACE_PREVIEW_HOST": "Preview.Example.Test"}
    async with gateway(tmp_path / "b", host="0.0.0.0", **zone) as api:
        ws = await api.workspace([8000])
        link = await api.link(ws, 8000)
        gateway_port = urlsplit(api.base).port
        own = f"http://p-{ws[3:]}-8000.preview.example.test:{gateway_port}"
        assert link["url"] == own + link["path"]
        # Its name reaches the proxy (nothing listens yet), given as a browser would send it.
        got = await browser.get(api.base + link["path"], headers={"Host": urlsplit(own).netloc})
        assert (got.status_code, "Nothing answers on port 8000" in got.text) == (502, True)


def test_the_preview_host_setting_is_a_name_apart_from_the_gateways() -> None:
    def zone(bind: str = "127.0.0.1", **env: str) -> str | None:
        return preview_zone(load_settings(env), bind)

    assert zone() == "localhost"
    assert zone("::1") == "localhost"
    assert zone("0.0.0.0") is None
    assert zone(MODAL_WORKSPACE_PUBLIC_URL="https://gw.example.com") is None
    assert zone("0.0.0.0", MODAL_WORKSPACE_PUBLIC_URL="http://localhost:8765") == "localhost"
    named = {"MODAL_WORKSPACE_PREVIEW_HOST": "Preview.Example.COM."}
    assert zone("0.0.0.0", **named) == "preview.example.com"
    beside = {"MODAL_WORKSPACE_PUBLIC_URL": "https://example.com", **named}
    assert zone("0.0.0.0", **beside) == "preview.example.com"
    for value, public in [
        ("*.preview.example.com", None),
        ("https://preview.example.com", None),
        ("preview.example.com:8443", None),
        ("127.0.0.1", None),
        ("example.com", "https://gw.example.com"),
    ]:
        env = {"MODAL_WORKSPACE_PREVIEW_HOST": value}
        if public:
            env["MODAL_WORKSPACE_PUBLIC_URL"] = public
        with pytest.raises(ConfigError, match="MODAL_WORKSPACE_PREVIEW_HOST"):
            load_settings(env)
