"""A workspace's terminal for people, at the link `workspace_terminal_url` answers: xterm.js in
the page, attached over a WebSocket (`TerminalRelay`) to one exec of the workspace, to watch it
or, with a write ticket, to type into it.

The ticket in the page's path is its only credential (no bearer token, never in a URL). The
socket, at `<TERMINAL_ROUTE>socket`, takes it in the handshake's `Sec-WebSocket-Protocol`
(`ticket.<ticket>`), where no access log writes it, and must come from the gateway's own
origin (`same_origin`); either refused, the handshake is answered 403 and nothing is relayed.
Script and style are this gateway's (`/pages/assets/`), under the experiment page's policy.
"""

from __future__ import annotations

import logging
from html import escape
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from ...errors import PermissionDeniedError
from ...operations.machinery import tickets
from ...operations.terminal import READ, TERMINAL_ROUTE, WRITE
from ...runtime.service import Service
from .experiment_page import ASSETS_ROUTE
from .page_headers import TICKETED_PAGE_HEADERS
from .same_origin import same_origin
from .terminal_relay import TerminalRelay
from .xterm_assets import Asset, xterm_assets

__all__ = ["SOCKET_PROTOCOL", "SOCKET_ROUTE", "terminal_page_routes"]

log = logging.getLogger(__name__)

SOCKET_ROUTE = TERMINAL_ROUTE + "socket"
# The subprotocol the page asks for and the gateway answers with; the ticket travels beside
# it as `ticket.<ticket>` and is never echoed back.
SOCKET_PROTOCOL = "mwc-terminal"
_TICKET_PROTOCOL = "ticket."

_HEADERS = TICKETED_PAGE_HEADERS
_OWN_ASSETS = {
    "terminal-page.js": "text/javascript; charset=utf-8",
    "terminal-page.css": "text/css; charset=utf-8",
}
_REFUSED = "This link is not valid: it may have expired. Ask for a new one."
_UNAVAILABLE = "The terminal page is not available on this gateway."


def terminal_page_routes(service: Service) -> list[BaseRoute]:
    pages = _Terminals(service)
    return [
        WebSocketRoute(SOCKET_ROUTE, pages.socket),
        Route(TERMINAL_ROUTE + "{ticket}", pages.page, methods=["GET"]),
        # Beside the experiment page's (`ASSETS_ROUTE`): the same policy, one folder of files.
        Route(ASSETS_ROUTE + "terminal/{name}", pages.asset, methods=["GET"]),
    ]


def _grant(service: Service, ticket: str) -> tuple[tickets.Grant, bool]:
    """What `ticket` grants and whether it may type: its purpose is named in its first field,
    which its signature covers, so reading it there chooses nothing a forger could."""
    write = ticket.startswith(WRITE + ".")
    return tickets.check(service.settings, ticket, WRITE if write else READ), write


class _Terminals:
    def __init__(self, service: Service) -> None:
        self.service = service
        self._assets: dict[str, Asset] | None = None

    def assets(self) -> dict[str, Asset]:
        if self._assets is None:
            own = resources.files(__package__) / "assets"
            loaded = {
                name: Asset(own.joinpath(name).read_text(encoding="utf-8"), media)
                for name, media in _OWN_ASSETS.items()
            }
            self._assets = {**loaded, **xterm_assets()}
        return self._assets

    async def page(self, request: Request) -> Response:
        try:
            grant, write = _grant(self.service, request.path_params["ticket"])
            self.assets()
        except PermissionDeniedError:
            return HTMLResponse(_refused(_REFUSED), 403, _HEADERS)
        except RuntimeError as err:
            log.error("the terminal page cannot be served: %s", err)
            return HTMLResponse(_refused(_UNAVAILABLE), 503, _HEADERS)
        return HTMLResponse(_terminal(grant.object_id, write), headers=_HEADERS)

    async def asset(self, request: Request) -> Response:
        try:
            found = self.assets().get(request.path_params["name"])
        except RuntimeError:
            found = None
        if found is None:
            return JSONResponse({"error": "not found"}, 404, _HEADERS)
        return Response(found.text, media_type=found.media_type, headers=_HEADERS)

    async def socket(self, socket: WebSocket) -> None:
        offered = _offered(socket)
        ticket = next((p[len(_TICKET_PROTOCOL) :] for p in offered if p.startswith("ticket.")), "")
        # The origin first: a page of another site learns nothing, not even whether its
        # ticket would do.
        if not same_origin(socket.scope) or SOCKET_PROTOCOL not in offered:
            await socket.close(1008)
            return
        try:
            grant, write = _grant(self.service, ticket)
        except PermissionDeniedError:
            await socket.close(1008)
            return
        cursor = _cursor(socket.query_params.get("cursor", "0"))
        await socket.accept(subprotocol=SOCKET_PROTOCOL)
        relay = TerminalRelay(self.service, socket, grant, write=write, cursor=cursor)
        await relay.run()


def _offered(socket: WebSocket) -> list[str]:
    # The server hands the app the handshake's `Sec-WebSocket-Protocol` list (ASGI's
    # `subprotocols`); a page offers two.
    return [str(p) for p in socket.scope.get("subprotocols") or ()][:8]


def _cursor(text: str) -> int:
    # The page's own count of what it has shown; anything else starts from the beginning.
    return int(text) if text.isdigit() and len(text) <= 19 else 0


def _refused(text: str) -> str:
    return _document("Not available", f'<p class="refused">{escape(text)}</p>', scripts=())


def _terminal(exec_id: str, write: bool) -> str:
    what = "typing into" if write else "watching (read-only)"
    body = f"""<header>
<span id="what">{escape(what)} <code>{escape(exec_id)}</code></span>
<span id="state" class="state">connecting</span>
</header>
<div id="terminal"></div>"""
    return _document(exec_id, body, ("xterm.js", "xterm-addon-fit.js", "terminal-page.js"), write)


def _document(title: str, body: str, scripts: tuple[str, ...], write: bool = False) -> str:
    # The page is at `<TERMINAL_ROUTE><ticket>`: relative links reach the assets and the socket
    # under whatever prefix the gateway is served at.
    loads = "\n".join(f'<script src="../assets/terminal/{n}" defer></script>' for n in scripts)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<meta name="robots" content="noindex, nofollow">
<title>{escape(title)} · terminal</title>
<link rel="stylesheet" href="../assets/terminal/xterm.css">
<link rel="stylesheet" href="../assets/terminal/terminal-page.css">
{loads}
</head>
<body data-write="{"true" if write else "false"}">
{body}
</body>
</html>
"""
