"""The HTTP face: FastAPI routes generated from the operation table, bearer auth, the error
shape, the page at `/`, `/healthz`, the GPT Actions schema and the MCP endpoint mounted at
`/mcp/`; and, on host names of their own, workspaces' previews (`preview_hosts.py`).

`create_app` takes a ready `Service`; the CLI (or a test) owns the driver and the settings.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ... import __version__
from ...config.gateway import preview_zone
from ...errors import (
    WorkspaceError,
    invalid_from_details,
)
from ...janitor import start_sweep
from ...operations import OPERATIONS, actions_operations, artifact_transfer
from ...operations.machinery.fields import ErrorResponse
from ...runtime.call import LINK_BASE, PREVIEW_ZONE
from ...runtime.service import Service
from ..keys import token_matches
from ..mcp import McpEndpoint
from ..oauth import ClientDocuments, oauth_provider, oauth_routes
from .bearer import BearerAuth
from .body_limit import BodyLimit
from .dispatch import OperationDispatch
from .experiment_page import experiment_page_routes
from .forwarded import TrustedProxyHeaders
from .home import home_page
from .openapi import ERROR_STATUSES, actions_schema, full_schema
from .preview_hosts import PreviewHosts, request_host
from .preview_proxy import PreviewProxy
from .routes import OperationRoute, OperationServer, bytes_response, endpoint, raw_openapi
from .terminal_page import terminal_page_routes

__all__ = ["BearerAuth", "create_app", "token_matches"]

# FastAPI's own OpenTelemetry hooks (in the versions that have them) ask the providers on every
# request whether anyone listens, reading the environment each time: a share of a woken
# long-poll's CPU (bench/README.md, "Many pollers"). The gateway keeps its own access log.
_NO_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)


def _error_response(err: WorkspaceError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(err.to_dict(), status_code=err.status, headers=headers)


def log_package_to_stderr() -> None:
    """The package's informational log lines (a lifecycle action, a transparent resume) on
    stderr, as uvicorn prints its own: once per process, and not where the embedding program
    has configured the package's logger itself."""
    logger = logging.getLogger("modal_workspace_core")
    if logger.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def create_app(
    service: Service,
    tokens: Sequence[str],
    *,
    host: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = (),
    close_service: bool = True,
    public_scheme: str | None = None,
    client_documents: ClientDocuments | None = None,
) -> FastAPI:
    """The whole HTTP application. `tokens` must not be empty: the caller decides where they
    come from (settings, or a token the CLI minted for a loopback-only server).
    `public_scheme` is the scheme clients use when the platform fixes it (Modal serves web
    endpoints over HTTPS only); the settings' public URL, when set, wins over everything.
    `client_documents` fetches the OAuth clients whose ids are URLs (a test's stands in for the
    network)."""
    if not tokens:
        raise ValueError("create_app needs at least one bearer token")
    mcp_app = McpEndpoint(service, host=host, allowed_hosts=allowed_hosts)
    previews = PreviewProxy(service)
    # The zone previews are served under, when this server has one (config.gateway).
    zone = preview_zone(service.settings, host)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with mcp_app.run():
            # A serving gateway also sweeps its workspaces' lifecycle (idle, lifetime, expiry),
            # and says what the sweep did on its own.
            log_package_to_stderr()
            start_sweep(service)
            service.keep_warm()
            try:
                yield
            finally:
                await previews.aclose()
                if close_service:
                    await service.close()

    app = FastAPI(
        title="modal-workspace",
        version=__version__,
        summary="Remote workspaces for AI agents: exec, git, files, watches.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        **_NO_TELEMETRY,
    )
    error_responses: dict[int | str, dict[str, Any]] = {
        status: {"model": ErrorResponse, "description": text}
        for status, text in ERROR_STATUSES.items()
    }
    servers = OperationServer.every(service)
    for server in servers:
        op = server.op
        app.router.add_api_route(
            "/api" + op.path,
            endpoint(server),
            methods=[op.method],
            operation_id=op.name,
            summary=op.summary,
            description=op.description,
            response_model=op.output,
            responses=error_responses,
            name=op.name,
            route_class_override=OperationRoute,
            openapi_extra=raw_openapi(op) or None,
        )

    @app.get(artifact_transfer.LINK_ROUTE + "{token}", include_in_schema=False)
    async def artifact_link(token: str) -> Response:
        # No bearer token: the signed link is the capability (one workspace, one path, until
        # it expires); what it names is packed and streamed like a REST download.
        workspace_id, path = artifact_transfer.verify_link(service, token)
        try:
            reply = await artifact_transfer.download(service, workspace_id, path)
        except Exception as exc:
            raise service.caller_error(exc) from None
        return bytes_response(reply)

    @app.get("/", include_in_schema=False)
    async def home(request: Request) -> Response:
        # Open, like /healthz: it names where things are, never a token or a workspace.
        public = service.settings.public_url or _server_url(request.scope, public_scheme)
        return home_page(public, service.driver.name, __version__)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "driver": service.driver.name, "version": __version__}

    @app.get("/action-openapi.json", include_in_schema=False)
    async def action_openapi(request: Request) -> JSONResponse:
        public = service.settings.public_url or _server_url(request.scope, public_scheme)
        wanted = actions_operations(service.settings)
        return JSONResponse(actions_schema(app.openapi(), public, wanted))

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            raw = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=app.routes
            )
            app.openapi_schema = full_schema(raw)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(WorkspaceError)
    async def on_workspace_error(_: Request, exc: WorkspaceError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _error_response(invalid_from_details(exc.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(
            exc.status_code, "invalid_argument"
        )
        body = {"error": {"code": code, "message": str(exc.detail)}}
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    # The OAuth authorization server of the MCP resource, at the root where discovery looks.
    oauth = oauth_provider(
        service.shared_store, service.settings.oauth_token_seconds, client_documents
    )
    app.router.routes.extend(oauth_routes(oauth, tokens))
    # Pages for people, opened with a ticket an authenticated call minted (no bearer token).
    app.router.routes.extend(experiment_page_routes(service))
    app.router.routes.extend(terminal_page_routes(service))
    app.mount("/mcp", mcp_app)
    # The same app answers `/mcp` itself, so clients need not follow a redirect to `/mcp/`.
    app.router.routes.append(Route("/mcp", mcp_app, methods=["GET", "POST", "DELETE"]))
    # Outermost last: the public base links are minted under, the bearer check, the body bound
    # (raw uploads to theirs).
    raw_uploads = [
        (op.method, "/api" + op.path) for op in OPERATIONS if op.raw and op.raw.request_media
    ]
    # Innermost of these: the operation routes, served ahead of FastAPI's router (dispatch.py).
    app.add_middleware(OperationDispatch, servers=servers)
    app.add_middleware(
        BodyLimit, raw_routes=raw_uploads, raw_max_bytes=service.settings.artifact_max_bytes
    )
    app.add_middleware(BearerAuth, tokens=tokens, oauth=oauth)
    # Outside the bearer check: a refusal points at the resource metadata under this base.
    app.add_middleware(
        LinkBase, public_url=service.settings.public_url, scheme=public_scheme, zone=zone
    )
    # A workspace's app, through a preview ticket (HTTP and WebSocket), on its own host name
    # alone: a request for one never reaches the gateway's routes, nor the reverse.
    app.add_middleware(PreviewHosts, previews=previews.app(), refused=previews.refused, zone=zone)
    # Outermost: no part of the app sees a proxy header that no trusted proxy sent.
    app.add_middleware(TrustedProxyHeaders, trusted=service.settings.trusted_proxies)
    return app


class LinkBase:
    """ASGI middleware: the base URL this request reached the gateway by (the settings' public
    URL when set), and the zone previews are served under: for the download and preview links
    an operation mints while serving it, and the origin a WebSocket handshake must come from
    (`same_origin`)."""

    def __init__(
        self, app: ASGIApp, public_url: str | None, scheme: str | None, zone: str | None
    ) -> None:
        self.app = app
        self.public_url = public_url
        self.scheme = scheme
        self.zone = zone

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        base = self.public_url or _server_url(scope, self.scheme)
        token = LINK_BASE.set(base)
        zone = PREVIEW_ZONE.set(self.zone)
        try:
            await self.app(scope, receive, send)
        finally:
            PREVIEW_ZONE.reset(zone)
            LINK_BASE.reset(token)


_PAGE_SCHEMES = {"ws": "http", "wss": "https"}


def _server_url(scope: Scope, public_scheme: str | None) -> str:
    """The base URL as the client reached it. Proxy headers are there only when a trusted proxy
    sent them (`TrustedProxyHeaders`, which also set the scheme from `X-Forwarded-Proto`). Read
    from the scope's headers as they are (not through a `Request`): every request pays for it."""
    # A WebSocket's scope says ws or wss: the page that opened it is http or https.
    raw_scheme = str(scope.get("scheme", "http"))
    scheme = _PAGE_SCHEMES.get(raw_scheme, raw_scheme)
    host = request_host(scope) or _listening(scope, scheme)
    scheme = public_scheme or scheme
    if scheme not in ("http", "https"):
        scheme = "https"
    return f"{scheme}://{host}"


def _listening(scope: Scope, scheme: str) -> str:
    """Where the server listens, for a request without a `Host` (as Starlette's URL says it)."""
    server = scope.get("server")
    if not server:
        return ""
    host, port = server
    return host if port == {"http": 80, "https": 443}.get(scheme) else f"{host}:{port}"
