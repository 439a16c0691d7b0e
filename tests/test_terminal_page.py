"""A workspace's terminal for people, through a served gateway on the local driver with the real
agent: `workspace_terminal_url` (REST, with the bearer token) opens a shell or names an exec
and mints a ticket; the page opens in a real browser (Debian's Chromium, headless) without the
token. There a person types `echo hi` and sees `hi`, resizes the window and sees `stty size`
follow, reloads and sees the earlier output again, and watches an agent's exec to its end.
Raw WebSocket clients check the socket's refusals: another origin, an expired ticket, one for
another exec or purpose, and a watching ticket that tries to type."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
import struct
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn
import websocket
from modal_workspace_core import _core
from modal_workspace_core.config import Settings, load_settings
from modal_workspace_core.operations import open_service
from modal_workspace_core.operations.terminal import READ, TERMINAL_ROUTE, WRITE
from modal_workspace_core.surfaces.http_serving import (
    AccessLog,
    CoalescingHttpToolsProtocol,
    _path_with_query,
)
from modal_workspace_core.surfaces.rest.app import create_app
from modal_workspace_core.surfaces.rest.connection_guard import ConnectionGuard
from modal_workspace_core.surfaces.rest.terminal_page import SOCKET_PROTOCOL, SOCKET_ROUTE
from modal_workspace_core.surfaces.rest.xterm_assets import REVIEWED, xterm_assets
from service_support import TOKEN, free_port, serving
from support.browser import chromium, needs_browser, policy_refusals


class Api:
    def __init__(self, base: str, client: httpx2.AsyncClient, settings: Settings) -> None:
        self.base, self.client, self.settings = base, client, settings

    async def workspace(self) -> str:
        made = await self.client.post("/api/workspaces", json={})
        assert made.status_code == 200, made.text
        return str(made.json()["workspace_id"])

    async def start(self, ws: str, command: str) -> str:
        body = {"command": command}
        started = await self.client.post(f"/api/workspaces/{ws}/realtime-execs", json=body)
        assert started.status_code == 200, started.text
        return str(started.json()["exec_id"])

    async def terminal(self, ws: str, **body: Any) -> dict[str, Any]:
        got = await self.client.post(f"/api/workspaces/{ws}/terminal", json=body)
        assert got.status_code == 200, got.text
        answer: dict[str, Any] = got.json()
        return answer

    async def output(self, ws: str, exec_id: str) -> str:
        got = await self.client.get(
            f"/api/workspaces/{ws}/realtime-execs/{exec_id}/events", params={"cursor": 0}
        )
        assert got.status_code == 200, got.text
        return "".join(e.get("data") or "" for e in got.json()["events"])

    async def state(self, ws: str, exec_id: str) -> str:
        got = await self.client.get(f"/api/workspaces/{ws}/realtime-execs/{exec_id}")
        return str(got.json()["state"])


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    # The tokens in the settings, as a deployment has them: tickets are signed with the key
    # derived from them, which every gateway of the deployment shares.
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
def browser() -> Iterator[Any]:
    with chromium(1100, 800) as driver:
        yield driver


# --- the page in a browser ------------------------------------------------------------------


def screen(driver: Any) -> list[str]:
    """The terminal's lines as xterm holds them (its scrollback and screen)."""
    lines = driver.execute_script(
        "const t = window.terminal; if (!t) { return []; }"
        "const b = t.buffer.active || t.buffer; const out = [];"
        "for (let i = 0; i < b.length; i++) {"
        "  const line = b.getLine(i); out.push(line ? line.translateToString(true) : ''); }"
        "return out;"
    )
    return [str(line) for line in lines]


def state_line(driver: Any) -> str:
    return str(driver.execute_script("return document.getElementById('state').textContent"))


def wait_for(driver: Any, check: Callable[[Any], Any], seconds: float = 30) -> Any:
    from selenium.webdriver.support.wait import WebDriverWait

    return WebDriverWait(driver, seconds, poll_frequency=0.2).until(check)


def type_into(driver: Any, text: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element(By.CSS_SELECTOR, ".xterm-helper-textarea")
    box.send_keys(text + Keys.ENTER)


def shown_line(driver: Any, line: str) -> bool:
    return line in [row.rstrip() for row in screen(driver)]


def open_shell(driver: Any, url: str) -> None:
    driver.get(url)  # no Authorization header: the ticket is the credential
    wait_for(driver, lambda d: state_line(d).startswith("running"))
    # The shell's prompt has been drawn: it is reading what is typed.
    wait_for(driver, lambda d: any(row.strip() for row in screen(d)))


@needs_browser
async def test_a_person_types_echo_hi_into_a_shell_and_sees_hi(api: Api, browser: Any) -> None:
    ws = await api.workspace()
    shell = await api.terminal(ws)
    assert shell["write"] is True and shell["exec_id"].startswith("ex-")
    assert shell["url"] == api.base + shell["path"] and shell["path"].startswith(TERMINAL_ROUTE)
    assert TOKEN not in shell["url"] and shell["path"].split("/")[-1].startswith(WRITE + ".")

    open_shell(browser, shell["url"])
    type_into(browser, "echo hi")
    wait_for(browser, lambda d: shown_line(d, "hi"))
    # The shell is the workspace's, in its root, on a terminal.
    type_into(browser, "pwd; tty; echo $TERM")
    wait_for(browser, lambda d: shown_line(d, "/workspace"))
    rows = [row.rstrip() for row in screen(browser)]
    assert any(row.startswith("/dev/pts/") for row in rows), rows
    assert "xterm-256color" in rows, rows

    # Everything the page loaded is this gateway's and within its policy; no token anywhere.
    assert policy_refusals(browser) == []
    used = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    for url in [browser.current_url, *used]:
        assert TOKEN not in url, url
        # The browser asks for /favicon.ico on its own (with no referrer: the page's policy).
        assert url.startswith(api.base + "/pages/") or url == api.base + "/favicon.ico", url
    # The output went through the exec's stream, where an API client reads it as well.
    assert "hi\r\n" in await api.output(ws, shell["exec_id"])


def stty_size(driver: Any, mark: str) -> tuple[int, int]:
    """`stty size` as the shell answers it, marked so that each answer is told apart."""
    type_into(driver, f"echo {mark} $(stty size)")
    found = wait_for(
        driver,
        lambda d: next((r.split() for r in screen(d) if r.startswith(mark + " ")), None),
    )
    return int(found[1]), int(found[2])


def terminal_size(driver: Any) -> tuple[int, int]:
    rows, cols = driver.execute_script("return [window.terminal.rows, window.terminal.cols]")
    return int(rows), int(cols)


@needs_browser
async def test_resizing_the_window_resizes_the_shells_terminal(api: Api, browser: Any) -> None:
    ws = await api.workspace()
    shell = await api.terminal(ws)
    open_shell(browser, shell["url"])
    # The page fitted the terminal to its window (not the 24x80 the shell opened with).
    first = stty_size(browser, "first")
    assert first == terminal_size(browser) and first != (24, 80)

    browser.set_window_size(640, 420)
    wait_for(browser, lambda d: terminal_size(d) != first)
    smaller = terminal_size(browser)
    assert smaller[0] < first[0] and smaller[1] < first[1]
    assert stty_size(browser, "second") == smaller


@needs_browser
async def test_a_reload_replays_the_earlier_output(api: Api, browser: Any) -> None:
    ws = await api.workspace()
    shell = await api.terminal(ws)
    open_shell(browser, shell["url"])
    type_into(browser, "echo before-$((6 * 7))")
    wait_for(browser, lambda d: shown_line(d, "before-42"))
    # The socket handed the page a fresh ticket, which is now in its address.
    wait_for(browser, lambda d: d.current_url != shell["url"])
    assert browser.current_url.startswith(api.base + TERMINAL_ROUTE + WRITE + ".")

    browser.refresh()
    wait_for(browser, lambda d: state_line(d).startswith("running"))
    # A new page starts from the stream's beginning: what the shell printed before is back.
    wait_for(browser, lambda d: shown_line(d, "before-42"))
    type_into(browser, "echo after-$((6 * 7))")
    wait_for(browser, lambda d: shown_line(d, "after-42"))
    rows = [row.rstrip() for row in screen(browser)]
    assert rows.count("before-42") == 1, rows


# Keeps the page's sockets where the test can reach them (a devtools injection, which the
# page's policy does not govern; the page itself keeps its socket to itself).
KEEP_SOCKETS = """
window.keptSockets = [];
window.WebSocket = class extends window.WebSocket {
  constructor(...args) { super(...args); window.keptSockets.push(this); }
};
"""


@needs_browser
async def test_a_dropped_socket_reconnects_from_the_pages_cursor(api: Api, browser: Any) -> None:
    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": KEEP_SOCKETS})
    ws = await api.workspace()
    shell = await api.terminal(ws)
    open_shell(browser, shell["url"])
    type_into(browser, "echo before-$((6 * 7))")
    wait_for(browser, lambda d: shown_line(d, "before-42"))

    browser.execute_script("window.keptSockets[0].close()")
    wait_for(browser, lambda d: state_line(d) == "reconnecting…", 10)
    wait_for(browser, lambda d: state_line(d).startswith("running"))
    again = browser.execute_script("return window.keptSockets.map(s => s.url)")
    assert len(again) == 2 and int(again[1].rsplit("cursor=", 1)[1]) > 0, again
    type_into(browser, "echo after-$((6 * 7))")
    wait_for(browser, lambda d: shown_line(d, "after-42"))
    # It resumed where it was: nothing shown twice.
    rows = [row.rstrip() for row in screen(browser)]
    assert rows.count("before-42") == 1, rows


@needs_browser
async def test_a_person_watches_an_agents_exec_read_only_to_its_end(api: Api, browser: Any) -> None:
    ws = await api.workspace()
    exec_id = await api.start(ws, "for i in 1 2 3 4 5; do echo tick-$i; sleep 0.4; done; exit 3")
    watch = await api.terminal(ws, exec_id=exec_id)
    assert watch["write"] is False and watch["exec_id"] == exec_id
    assert watch["path"].split("/")[-1].startswith(READ + ".")

    browser.get(watch["url"])
    wait_for(browser, lambda d: shown_line(d, "tick-5"))
    wait_for(browser, lambda d: state_line(d) == "ended with code 3")
    rows = [row.rstrip() for row in screen(browser)]
    assert [r for r in rows if r.startswith("tick-")] == [f"tick-{i}" for i in range(1, 6)]
    assert "read-only" in browser.find_element("id", "what").text
    assert policy_refusals(browser) == []


async def test_the_page_loads_xterm_from_the_gateway_under_a_strict_policy(api: Api) -> None:
    ws = await api.workspace()
    exec_id = await api.start(ws, "true")
    url = (await api.terminal(ws, exec_id=exec_id))["url"]
    async with httpx2.AsyncClient(timeout=30) as anonymous:
        page = await anonymous.get(url)
        assert page.status_code == 200, page.text
        scripts = re.findall(r'<script src="([^"]+)"', page.text)
        assert scripts == [
            "../assets/terminal/xterm.js",
            "../assets/terminal/xterm-addon-fit.js",
            "../assets/terminal/terminal-page.js",
        ]
        assert "<script>" not in page.text and TOKEN not in page.text
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        assert page.headers["referrer-policy"] == "no-referrer"
        assert page.headers["cross-origin-opener-policy"] == "same-origin"
        base = url.rsplit("/", 2)[0] + "/assets/terminal/"
        for name, (path, digest) in REVIEWED.items():
            served = await anonymous.get(base + name)
            assert served.status_code == 200, name
            # The package's file as reviewed, byte for byte.
            assert hashlib.sha256(served.content).hexdigest() == digest, path
            assert served.headers["content-security-policy"] == policy
        assert (await anonymous.get(base + "..%2Fapp.py")).status_code == 404


def test_a_changed_xterm_file_is_not_served(monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = REVIEWED["xterm.js"]
    monkeypatch.setitem(REVIEWED, "xterm.js", (path, "0" * 64))
    xterm_assets.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="not the file reviewed"):
            xterm_assets()
    finally:
        monkeypatch.undo()
        xterm_assets.cache_clear()
    assert set(xterm_assets()) == set(REVIEWED)


# --- the socket's refusals ------------------------------------------------------------------


def socket_url(api: Api) -> str:
    return "ws" + api.base.removeprefix("http") + SOCKET_ROUTE + "?cursor=0"


def connect(api: Api, ticket: str, origin: str | None = "") -> websocket.WebSocket:
    """A raw WebSocket client, as a page of `origin` would open the socket (the gateway's own
    when empty; none at all when None)."""
    return websocket.create_connection(
        socket_url(api),
        timeout=30,
        subprotocols=[SOCKET_PROTOCOL, f"ticket.{ticket}"],
        origin=api.base if origin == "" else origin,
        suppress_origin=origin is None,
    )


def refused(api: Api, ticket: str, origin: str | None = "") -> int:
    """The status a refused handshake was answered with."""
    with pytest.raises(websocket.WebSocketBadStatusException) as caught:
        connect(api, ticket, origin).close()
    return int(caught.value.status_code)


def receive_until(
    sock: websocket.WebSocket, done: Callable[[bytes, list[dict[str, Any]]], bool]
) -> tuple[bytes, list[dict[str, Any]]]:
    """Output (without the cursors) and control messages, until `done` says so."""
    output, controls = b"", []
    deadline = time.monotonic() + 30
    while not done(output, controls):
        assert time.monotonic() < deadline, (output, controls)
        opcode, data = sock.recv_data()
        if opcode == websocket.ABNF.OPCODE_BINARY:
            output += data[8:]
        elif opcode == websocket.ABNF.OPCODE_TEXT:
            controls.append(json.loads(data))
        elif opcode == websocket.ABNF.OPCODE_CLOSE:
            controls.append({"type": "closed", "code": struct.unpack(">H", data[:2])[0]})
    return output, controls


def ticket_of(page: dict[str, Any]) -> str:
    return str(page["path"].split("/")[-1])


async def test_a_socket_from_another_origin_is_refused(api: Api) -> None:
    ws = await api.workspace()
    ticket = ticket_of(await api.terminal(ws))
    for foreign in (
        "http://evil.example",
        api.base.replace("127.0.0.1", "localhost"),
        api.base + ".evil.example",
        "https" + api.base.removeprefix("http"),
        "null",
        None,
    ):
        assert refused(api, ticket, foreign) == 403, foreign
    # The same ticket from the gateway's own origin is taken.
    sock = connect(api, ticket)
    assert sock.subprotocol == SOCKET_PROTOCOL
    receive_until(sock, lambda _o, c: any(m["type"] == "state" for m in c))
    sock.close()
    # A socket that offers no ticket, or not the terminal's protocol, is refused too.
    with pytest.raises(websocket.WebSocketBadStatusException):
        websocket.create_connection(socket_url(api), origin=api.base, timeout=30)


async def test_expired_foreign_and_altered_tickets_are_refused(api: Api) -> None:
    ws, other_ws = await api.workspace(), await api.workspace()
    exec_id = await api.start(ws, "sleep 60")
    other_exec = await api.start(ws, "sleep 60")
    ticket = ticket_of(await api.terminal(ws, exec_id=exec_id))
    purpose, workspace, obj, expires, nonce, signature = ticket.split(".")
    assert (purpose, workspace, obj) == (READ, ws, exec_id)
    assert int(expires) - time.time() == pytest.approx(300, abs=5)
    key = api.settings.ticket_secret
    assert key is not None
    now = int(time.time())
    expired, _ = _core.mint_ticket(key, WRITE, ws, exec_id, now - 301, 300)
    other_purpose, _ = _core.mint_ticket(key, "experiment-page", ws, exec_id, now, 60)
    bad = {
        "expired": expired,
        "another exec": f"{purpose}.{ws}.{other_exec}.{expires}.{nonce}.{signature}",
        "another workspace": f"{purpose}.{other_ws}.{exec_id}.{expires}.{nonce}.{signature}",
        "watching made typing": f"{WRITE}.{ws}.{exec_id}.{expires}.{nonce}.{signature}",
        "another purpose": other_purpose,
        "a later expiry": f"{purpose}.{ws}.{exec_id}.{int(expires) + 60}.{nonce}.{signature}",
        "not a ticket": "not-a-ticket",
        "none": "",
    }
    async with httpx2.AsyncClient(timeout=30) as anonymous:
        for what, forged in bad.items():
            assert refused(api, forged) == 403, what
            if forged:
                page = await anonymous.get(api.base + TERMINAL_ROUTE + forged)
                assert page.status_code == 403, what
                assert "not valid" in page.text and ws not in page.text
    # A ticket is minted only for an exec of the workspace named.
    missing = await api.client.post(
        f"/api/workspaces/{other_ws}/terminal", json={"exec_id": exec_id}
    )
    assert missing.status_code == 404, missing.text


async def test_a_watching_ticket_cannot_type_and_a_typing_one_can(api: Api) -> None:
    ws = await api.workspace()
    exec_id = await api.start(ws, "cat")
    watching = ticket_of(await api.terminal(ws, exec_id=exec_id))
    sock = connect(api, watching)
    receive_until(sock, lambda _o, c: any(m["type"] == "state" for m in c))
    sock.send(json.dumps({"type": "input", "data": "typed-by-a-watcher\n"}))
    _, controls = receive_until(sock, lambda _o, c: any(m["type"] == "closed" for m in c))
    assert {"type": "closed", "code": 1008} in controls
    # Nor may it resize the exec's terminal.
    sock = connect(api, watching)
    sock.send(json.dumps({"type": "resize", "rows": 10, "cols": 10}))
    _, controls = receive_until(sock, lambda _o, c: any(m["type"] == "closed" for m in c))
    assert {"type": "closed", "code": 1008} in controls

    typing = ticket_of(await api.terminal(ws, exec_id=exec_id, write=True))
    assert typing.startswith(WRITE + ".")
    sock = connect(api, typing)
    sock.send(json.dumps({"type": "input", "data": "typed-by-the-person\n"}))
    receive_until(sock, lambda o, _c: b"typed-by-the-person\n" in o)
    sock.close()
    await asyncio.sleep(0.5)
    assert "typed-by-a-watcher" not in await api.output(ws, exec_id)
    assert await api.state(ws, exec_id) == "running"


async def test_a_socket_opened_in_time_outlives_its_ticket(api: Api) -> None:
    ws = await api.workspace()
    exec_id = await api.start(ws, "for i in $(seq 100); do echo tick-$i; sleep 0.2; done")
    key = api.settings.ticket_secret
    assert key is not None
    short, expires = _core.mint_ticket(key, READ, ws, exec_id, int(time.time()), 2)
    sock = connect(api, short)
    await asyncio.sleep(max(0.0, expires - time.time()) + 0.5)
    # Expired now: a new socket is refused, the open one goes on with its exec's output and
    # holds a fresh ticket the page may reconnect with.
    assert refused(api, short) == 403
    _, controls = receive_until(sock, lambda o, _c: b"tick-15\n" in o)
    sock.close()
    fresh = next(m["ticket"] for m in controls if m["type"] == "ticket")
    assert fresh != short and fresh.startswith(f"{READ}.{ws}.{exec_id}.")
    again = connect(api, fresh)
    receive_until(again, lambda _o, c: any(m["type"] == "state" for m in c))
    again.close()


async def test_a_socket_resumes_from_its_cursor(api: Api) -> None:
    ws = await api.workspace()
    exec_id = await api.start(ws, "echo one; sleep 1; echo two; sleep 60")
    ticket = ticket_of(await api.terminal(ws, exec_id=exec_id))
    sock = connect(api, ticket)
    cursors: list[int] = []
    output = b""
    while b"one\n" not in output:
        opcode, data = sock.recv_data()
        if opcode == websocket.ABNF.OPCODE_BINARY:
            cursors.append(struct.unpack(">Q", data[:8])[0])
            output += data[8:]
    sock.close()
    url = socket_url(api).replace("cursor=0", f"cursor={cursors[-1]}")
    again = websocket.create_connection(
        url, timeout=30, subprotocols=[SOCKET_PROTOCOL, f"ticket.{ticket}"], origin=api.base
    )
    rest, _ = receive_until(again, lambda o, _c: b"two\n" in o)
    again.close()
    assert b"one" not in rest and rest.startswith(b"two\n")


@contextlib.asynccontextmanager
async def served_as_serve_does(app: Any, guard: ConnectionGuard) -> AsyncIterator[str]:
    """`app` under `modal-workspace serve`'s protocol (the connection guard, writes joined) and
    access log, in a thread; its base URL."""
    port = free_port()
    config = uvicorn.Config(
        AccessLog(app),
        host="127.0.0.1",
        port=port,
        http=CoalescingHttpToolsProtocol.guarded(guard),
        lifespan="on",
        log_level="warning",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "uvicorn did not start"
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 30)


async def test_the_socket_under_the_serving_protocol_leaves_the_connection_guard(
    tmp_path: Path,
) -> None:
    env = {"MODAL_WORKSPACE_MCP_TOKEN": TOKEN, "MODAL_WORKSPACE_JANITOR_SECONDS": "0"}
    settings = load_settings(env, data_root=tmp_path / "d")
    guard = ConnectionGuard(64)
    async with served_as_serve_does(create_app(open_service(settings), [TOKEN]), guard) as url:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
            api = Api(url, client, settings)
            ws = await api.workspace()
            ticket = ticket_of(await api.terminal(ws))
            counted = len(guard)
            sock = connect(api, ticket)
            sock.send(json.dumps({"type": "input", "data": "echo $((40 + 2))\r"}))
            receive_until(sock, lambda o, _c: b"42\r\n" in o)
            # The upgraded connection is the socket's: the guard, which counts connections
            # that may be closed for room, no longer holds it.
            assert len(guard) == counted
            sock.close()
            await client.delete(f"/api/workspaces/{ws}")


async def test_a_websocket_to_the_api_or_mcp_is_refused_before_it_reaches_them(api: Api) -> None:
    # The gateway serves WebSockets for the terminal alone; the bearer check's prefixes take
    # none, with or without a token.
    for path in ("/mcp/", "/mcp", "/api/workspaces"):
        for header in ([], [f"Authorization: Bearer {TOKEN}"]):
            with pytest.raises(websocket.WebSocketBadStatusException) as caught:
                websocket.create_connection(
                    "ws" + api.base.removeprefix("http") + path,
                    origin=api.base,
                    header=header,
                    timeout=30,
                ).close()
            assert caught.value.status_code == 403, (path, header)


def test_the_access_log_names_the_terminal_route_never_its_ticket() -> None:
    ticket = f"{WRITE}.ws-{'0' * 32}.ex-{'1' * 32}.1700000000.{'A' * 22}.{'B' * 43}"
    scope = {"path": f"{TERMINAL_ROUTE}{ticket}", "query_string": b""}
    assert _path_with_query(scope) == f"{TERMINAL_ROUTE}<ticket>"
