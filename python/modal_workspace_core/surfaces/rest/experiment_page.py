"""An experiment run's page for people, at the link `experiment_page_url` answers: the run's
name, state, timings, metrics and plot, refreshed while it runs. The ticket in the path is the
only credential (no bearer token: a browser has none to send, and a token in a URL would leak
through history, logs and referrers); it grants this one run until it expires.

Beside the page, under the same ticket: `run.json` (what the page shows, for its refresh) and
`plot.png`. The page's script and style are served here too (`/pages/assets/`), so its policy
lets it load nothing from anywhere else and run no inline script. Every refusal of a ticket is
the same page, whatever was wrong with it.
"""

from __future__ import annotations

from html import escape
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ...errors import NotFoundError, PermissionDeniedError, WorkspaceError
from ...operations import call, operation, parse_input
from ...operations.experiment_page import PAGE_ROUTE, PURPOSE
from ...operations.machinery import tickets
from ...runtime.service import Service
from .experiment_view import run_view
from .page_headers import TICKETED_PAGE_HEADERS

__all__ = ["ASSETS_ROUTE", "REFRESH_SECONDS", "experiment_page_routes"]

ASSETS_ROUTE = "/pages/assets/"
# How often an open page reads the run again while it runs.
REFRESH_SECONDS = 3

_HEADERS = TICKETED_PAGE_HEADERS
_ASSETS = {
    "experiment-page.js": "text/javascript; charset=utf-8",
    "experiment-page.css": "text/css; charset=utf-8",
}
_ASSET_TEXT = {
    name: (resources.files(__package__) / "assets" / name).read_text(encoding="utf-8")
    for name in _ASSETS
}

# What a refused ticket, or a run that cannot be read, answers: nothing about why.
_REFUSED = "This link is not valid: it may have expired. Ask for a new one."
_GONE = "This run is no longer available."
_UNREADABLE = "The run cannot be read just now. Try again in a moment."


def experiment_page_routes(service: Service) -> list[BaseRoute]:
    pages = _Pages(service)
    return [
        Route(PAGE_ROUTE + "{ticket}", pages.page, methods=["GET"]),
        Route(PAGE_ROUTE + "{ticket}/run.json", pages.run_json, methods=["GET"]),
        Route(PAGE_ROUTE + "{ticket}/plot.png", pages.plot, methods=["GET"]),
        Route(ASSETS_ROUTE + "{name}", _asset, methods=["GET"]),
    ]


class _Pages:
    def __init__(self, service: Service) -> None:
        self.service = service

    async def _call(self, name: str, ticket: str) -> Any:
        """`name` (experiment_get or experiment_plot) for the run `ticket` grants."""
        grant = tickets.check(self.service.settings, ticket, PURPOSE)
        op = operation(name)
        args = {"workspace_id": grant.workspace_id, "run_id": grant.object_id}
        return await call(self.service, op, parse_input(op, args))

    async def page(self, request: Request) -> Response:
        try:
            run = await self._call("experiment_get", request.path_params["ticket"])
        except WorkspaceError as err:
            status, text = _refusal(err)
            return HTMLResponse(_document("Not available", f"<p>{text}</p>"), status, _HEADERS)
        view = run_view(run.model_dump(mode="json"))
        body = _body(view, request.path_params["ticket"])
        return HTMLResponse(_document(view["name"], body, view), headers=_HEADERS)

    async def run_json(self, request: Request) -> Response:
        try:
            run = await self._call("experiment_get", request.path_params["ticket"])
        except WorkspaceError as err:
            status, text = _refusal(err)
            return JSONResponse({"error": text}, status, _HEADERS)
        return JSONResponse(run_view(run.model_dump(mode="json")), headers=_HEADERS)

    async def plot(self, request: Request) -> Response:
        try:
            drawn = await self._call("experiment_plot", request.path_params["ticket"])
        except WorkspaceError as err:
            status, text = _refusal(err)
            return JSONResponse({"error": text}, status, _HEADERS)
        return Response(drawn.image, media_type="image/png", headers=_HEADERS)


async def _asset(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _ASSETS:
        return JSONResponse({"error": "not found"}, 404, _HEADERS)
    return Response(_ASSET_TEXT[name], media_type=_ASSETS[name], headers=_HEADERS)


def _refusal(err: WorkspaceError) -> tuple[int, str]:
    if isinstance(err, PermissionDeniedError):
        return 403, _REFUSED
    if isinstance(err, NotFoundError):
        return 404, _GONE
    return (err.status if err.status >= 500 else 503), _UNREADABLE


def _document(title: str, body: str, view: dict[str, Any] | None = None) -> str:
    # The page is at `<PAGE_ROUTE><ticket>`: relative links reach the assets and the run's
    # JSON and plot under whatever prefix the gateway is served at.
    state = escape(view["state"]) if view else ""
    version = escape(view["version"]) if view else ""
    live = "true" if view and view["live"] else "false"
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<meta name="robots" content="noindex, nofollow">
<title>{escape(title)} · experiment</title>
<link rel="stylesheet" href="../assets/experiment-page.css">
<script src="../assets/experiment-page.js" defer></script>
</head>
<body data-state="{state}" data-live="{live}" data-version="{version}" \
data-refresh-seconds="{REFRESH_SECONDS}">
<main>
{body}
</main>
</body>
</html>
"""


def _body(view: dict[str, Any], ticket: str) -> str:
    facts = "\n".join(
        f"<dt>{escape(term)}</dt><dd>{escape(value)}</dd>" for term, value in view["facts"]
    )
    rows = "\n".join(
        "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>"
        for row in view["metrics"]
    )
    state = escape(view["state"])
    # Relative to the page (`<PAGE_ROUTE><ticket>`); the ticket passed its check, and is escaped
    # all the same.
    plot = escape(f"{ticket}/plot.png")
    return f"""<header>
<h1 id="name">{escape(view["name"])}</h1>
<span id="state" class="state {state}">{state}</span>
</header>
<dl id="facts">
{facts}
</dl>
<h2>Metrics</h2>
<p id="no-metrics"{"" if not rows else " hidden"}>No metrics reported yet.</p>
<table>
<thead><tr><th>name</th><th>last</th><th>min</th><th>max</th><th>count</th></tr></thead>
<tbody id="metrics">
{rows}
</tbody>
</table>
<h2>Plot</h2>
<img id="plot" src="{plot}" alt="The run's metrics over time" width="1000" \
height="640">
<p id="status" class="status">{_status(view)}</p>"""


def _status(view: dict[str, Any]) -> str:
    if view["live"]:
        return f"Updating every {REFRESH_SECONDS} s while the run goes."
    return "The run has ended."
