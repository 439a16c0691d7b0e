"""The HTTP face: FastAPI routes generated from the operation table, bearer auth, the error
shape, `/healthz`, the GPT Actions schema and the MCP endpoint mounted at `/mcp/`.

`create_app` takes a ready `Service`; the CLI (or a test) owns the driver and the settings.
"""

from __future__ import annotations

import hmac
import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any, cast

from fastapi import Body, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, create_model
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from . import __version__
from .errors import (
    InvalidArgumentError,
    UnauthenticatedError,
    WorkspaceError,
    invalid_from_details,
)
from .mcp import McpEndpoint
from .models import Input
from .openapi import ERROR_STATUSES, actions_schema, full_schema
from .results import ErrorResponse
from .service import OPERATIONS, Operation, Service, call_json, parse_input

__all__ = ["BearerAuth", "create_app", "token_matches"]

_ID_PATTERNS = {
    "workspace_id": "^ws-[0-9a-f]{32}$",
    "exec_id": "^ex-[0-9a-f]{32}$",
    "watch_id": "^fw-[0-9a-f]{32}$",
}
PROTECTED_PREFIXES = ("/api", "/mcp")


def token_matches(header: bytes | None, tokens: Sequence[bytes]) -> bool:
    """True when `header` is `Bearer <one of tokens>`. Every token is compared, each in
    constant time, so the time taken says nothing about which token came close."""
    if not header or not header.isascii():
        return False
    scheme, _, presented = header.strip().partition(b" ")
    presented = presented.strip()
    if scheme.lower() != b"bearer" or not presented:
        return False
    matched = False
    for token in tokens:
        matched |= hmac.compare_digest(token, presented)
    return matched


def _error_response(err: WorkspaceError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(err.to_dict(), status_code=err.status, headers=headers)


class BearerAuth:
    """ASGI middleware: `/api/*` and `/mcp/*` need `Authorization: Bearer <token>`; a missing,
    malformed or non-ASCII header, or a second one, is a 401 — never a 500."""

    def __init__(self, app: ASGIApp, tokens: Sequence[str]) -> None:
        if not tokens:
            raise ValueError("BearerAuth needs at least one token")
        self.app = app
        self.tokens = [t.encode("ascii") for t in tokens]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and _protected(scope.get("path", "")):
            values = [v for k, v in scope.get("headers", []) if k.lower() == b"authorization"]
            if len(values) != 1 or not token_matches(values[0], self.tokens):
                err = UnauthenticatedError(
                    "missing or invalid bearer token: send 'Authorization: Bearer <token>'"
                )
                response = _error_response(err, {"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _protected(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in PROTECTED_PREFIXES)


def _rest_model(op: Operation) -> type[BaseModel] | None:
    """The input model without its path parameters: the query string or the JSON body."""
    fields = {
        name: (info.annotation, info)
        for name, info in op.input.model_fields.items()
        if name not in op.path_params
    }
    if not fields:
        return None
    suffix = "Query" if op.method in ("GET", "DELETE") else "Body"
    name = "".join(part.title() for part in op.name.split("_")) + suffix
    # On the bare `Input` (its config: unknown fields refused), not the input's own parent,
    # whose fields (path parameters among them) `fields` has already sorted.
    return create_model(name, __base__=Input, **fields)  # type: ignore[call-overload,no-any-return]


def _endpoint(service: Service, op: Operation) -> Callable[..., Awaitable[Any]]:
    rest = _rest_model(op)
    params = []
    annotation: Any
    for name in op.path_params:
        info = op.input.model_fields[name]
        annotation = Annotated[str, Path(description=info.description, pattern=_ID_PATTERNS[name])]
        params.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation)
        )
    if rest is not None:
        if op.method in ("GET", "DELETE"):
            annotation = Annotated[rest, Query()]
            params.append(
                inspect.Parameter("params", inspect.Parameter.KEYWORD_ONLY, annotation=annotation)
            )
        elif any(f.is_required() for f in rest.model_fields.values()):
            annotation = Annotated[rest, Body()]
            params.append(
                inspect.Parameter("params", inspect.Parameter.KEYWORD_ONLY, annotation=annotation)
            )
        else:  # every field has a default: the body may be left out entirely
            annotation = Annotated[rest | None, Body()]
            params.append(
                inspect.Parameter(
                    "params", inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=None
                )
            )

    async def endpoint(**kwargs: Any) -> Any:  # documents the route; never called (below)
        raise AssertionError("operation routes are served by OperationRoute")

    endpoint.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    endpoint.__name__ = op.name
    endpoint.serve = _handler(service, op, rest)  # type: ignore[attr-defined]
    return endpoint


class OperationRoute(APIRoute):
    """A route whose endpoint signature describes the operation to OpenAPI, while requests are
    served by the operation's own handler: the input is validated once, by the operation's
    model. FastAPI's per-request parameter solving (then a second validation) cost more than
    everything else a long-poll does."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        serve: Callable[[Request], Coroutine[Any, Any, Response]] = cast(Any, self.endpoint).serve
        return serve


def _handler(
    service: Service, op: Operation, rest: type[BaseModel] | None
) -> Callable[[Request], Coroutine[Any, Any, Response]]:
    fields = set(rest.model_fields) if rest is not None else set()
    in_query = op.method in ("GET", "DELETE")

    async def serve(request: Request) -> Response:
        # Every query field is a scalar (a test holds GET and DELETE inputs to that).
        data = dict(request.query_params.items()) if in_query else await _json_object(request)
        for name in data:
            if name not in fields:  # path parameters among them: they come from the path only
                raise InvalidArgumentError(f"{name[:64]}: unknown field", field=name[:64])
        data.update(request.path_params)
        body = await call_json(service, op, parse_input(op, data))
        return Response(body, media_type="application/json")

    return serve


async def _json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object; no body (or `null`) is an empty one."""
    body = await request.body()
    if not body.strip():
        return {}
    try:
        parsed = json.loads(body)
    except ValueError:
        raise InvalidArgumentError("the body is not valid JSON") from None
    if parsed is None:
        return {}
    if not isinstance(parsed, dict):
        raise InvalidArgumentError("the body must be a JSON object")
    return parsed


def create_app(
    service: Service,
    tokens: Sequence[str],
    *,
    host: str = "127.0.0.1",
    allowed_hosts: Sequence[str] = (),
    close_service: bool = True,
) -> FastAPI:
    """The whole HTTP application. `tokens` must not be empty: the caller decides where they
    come from (settings, or a token the CLI minted for a loopback-only server)."""
    if not tokens:
        raise ValueError("create_app needs at least one bearer token")
    mcp_app = McpEndpoint(service, host=host, allowed_hosts=allowed_hosts)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with mcp_app.run():
            try:
                yield
            finally:
                if close_service:
                    await service.close()

    app = FastAPI(
        title="modal-workspace",
        version=__version__,
        summary="Remote workspaces for AI agents: exec, git, files, watches.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    error_responses: dict[int | str, dict[str, Any]] = {
        status: {"model": ErrorResponse, "description": text}
        for status, text in ERROR_STATUSES.items()
    }
    for op in OPERATIONS:
        app.router.add_api_route(
            "/api" + op.path,
            _endpoint(service, op),
            methods=[op.method],
            operation_id=op.name,
            summary=op.summary,
            description=op.description,
            response_model=op.output,
            responses=error_responses,
            name=op.name,
            route_class_override=OperationRoute,
        )

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "driver": service.driver.name, "version": __version__}

    @app.get("/action-openapi.json", include_in_schema=False)
    async def action_openapi(request: Request) -> JSONResponse:
        return JSONResponse(actions_schema(app.openapi(), _server_url(request)))

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

    app.mount("/mcp", mcp_app)
    # The same app answers `/mcp` itself, so clients need not follow a redirect to `/mcp/`.
    app.router.routes.append(Route("/mcp", mcp_app, methods=["GET", "POST", "DELETE"]))
    app.add_middleware(BearerAuth, tokens=tokens)
    return app


def _server_url(request: Request) -> str:
    """The public base URL as the client reached it, honouring a proxy's X-Forwarded-* headers."""
    headers = request.headers
    proto = headers.get("x-forwarded-proto", request.url.scheme).split(",")[0].strip()
    host = headers.get("x-forwarded-host") or headers.get("host") or request.url.netloc
    host = host.split(",")[0].strip()
    if proto not in ("http", "https"):
        proto = "https"
    return f"{proto}://{host}"
