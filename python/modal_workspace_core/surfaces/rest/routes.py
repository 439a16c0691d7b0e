"""The REST routes of the operation table: each operation's route as FastAPI documents it (its
OpenAPI signature), and the middleware that serves those routes.

A request is read and validated once, by the operation's own model: FastAPI's router finds the
route, and `OperationRoute` hands the request's parts to the operation's server (its endpoint
signature only documents the operation to OpenAPI).
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Annotated, Any, cast

from fastapi import Body, Path, Query, Request
from fastapi.responses import Response, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, create_model
from starlette.datastructures import QueryParams
from starlette.types import Receive, Scope, Send

from ...errors import InvalidArgumentError
from ...operations import OPERATIONS, Operation, parse_request, run
from ...operations.machinery.fields import Input
from ...operations.machinery.fitting import fit_json
from ...operations.machinery.limits import ACTIONS_MAX_CHARS, ACTIONS_SECONDS
from ...operations.machinery.pages import PageResult
from ...operations.machinery.run import check_grant, in_call
from ...operations.machinery.table import RawReply
from ...path_view import shown
from ...runtime.call import ANSWER_BY
from ...runtime.service import Service


def path_pattern(op: Operation, name: str) -> str:
    """A path parameter's pattern: the one the core's rule for its field gives
    (`operations.machinery.fields.core_pattern`). Every path parameter names an id or a name the
    core checks, so a field without one is a mistake caught when the routes are built."""
    extra = op.input.model_fields[name].json_schema_extra
    pattern = extra.get("pattern") if isinstance(extra, dict) else None
    if not isinstance(pattern, str):
        raise TypeError(f"{op.name}.{name}: a path parameter needs its core rule's pattern")
    return pattern


def rest_model(op: Operation) -> type[BaseModel] | None:
    """The input model without its path parameters: the query string or the JSON body."""
    fields = {
        name: (info.annotation, info)
        for name, info in op.input_for("actions").model_fields.items()
        if name not in op.path_params
    }
    if not fields:
        return None
    suffix = "Query" if takes_query(op) else "Body"
    name = "".join(part.title() for part in op.name.split("_")) + suffix
    # On the bare `Input` (its config: unknown fields refused), not the input's own parent,
    # whose fields (path parameters among them) `fields` has already sorted.
    return create_model(name, __base__=Input, **fields)  # type: ignore[call-overload,no-any-return]


def takes_query(op: Operation) -> bool:
    """Whether the route's inputs (beyond the path) come from the query string
    (`Operation.rest_query`)."""
    return op.rest_query


class OperationServer:
    """Serves one operation from a request's parts: the query (GET, DELETE) or JSON body, and
    the path parameters. Answers the response body's JSON; raises `WorkspaceError`."""

    def __init__(self, service: Service, op: Operation) -> None:
        self.service = service
        self.op = op
        self.rest = rest_model(op)
        self.fields = frozenset(self.rest.model_fields) if self.rest is not None else frozenset()
        self.in_query = takes_query(op)

    @classmethod
    def every(cls, service: Service) -> list[OperationServer]:
        """A server for each operation of the table, in its order."""
        return [cls(service, op) for op in OPERATIONS]

    async def __call__(
        self, query: Mapping[str, str], body: bytes, path_params: Mapping[str, str]
    ) -> str:
        # Every query field is a scalar (a test holds GET and DELETE inputs to that).
        data = dict(query) if self.in_query else _json_object(body)
        for name in data:
            if name not in self.fields:  # path parameters among them: from the path only
                raise InvalidArgumentError(f"{name[:64]}: unknown field", field=name[:64])
        data.update(path_params)
        inp = await parse_request(self.service, self.op, data, "actions")
        return await call_json(self.service, self.op, inp)

    async def raw(
        self,
        query: QueryParams,
        body: AsyncIterator[bytes],
        path_params: Mapping[str, str],
        headers: Mapping[str, str],
    ) -> str | RawReply:
        """The byte form of an operation with `raw`: its server's bytes, or JSON."""
        raw = self.op.raw
        assert raw is not None
        check_grant(self.op)
        inp = await self.parse(query, path_params)
        result = await in_call(self.service, raw.serve(self.service, inp, body, headers))
        if result is None:
            return await call_json(self.service, self.op, inp)
        if isinstance(result, RawReply):
            return result
        root = await self.service.root(getattr(inp, "workspace_id", None))
        return fit_json(shown(result, root), ACTIONS_RESPONSE_CHARS)

    async def parse(self, query: QueryParams, path_params: Mapping[str, str]) -> Input:
        data: dict[str, Any] = dict(query.items())
        for name in data:
            if name not in self.fields:
                raise InvalidArgumentError(f"{name[:64]}: unknown field", field=name[:64])
        data.update(path_params)
        return await parse_request(self.service, self.op, data, "actions")


# What a GPT Actions response may take, with room to spare under its limit.
ACTIONS_RESPONSE_CHARS = ACTIONS_MAX_CHARS - 5_000
# And the time it may take, with room for the network and the client under its limit.
ACTIONS_MARGIN_SECONDS = 5.0


async def call_json(service: Service, op: Operation, inp: Input) -> str:
    """The operation's answer as the JSON of its output (REST's body, for GPT Actions), fitted
    to `ACTIONS_RESPONSE_CHARS`. A page of events is written around the agent's own JSON of the
    events, without a model of each; its `max_bytes` bound already keeps it within."""
    # Agent requests end in time for the answer to reach GPT Actions before it gives up.
    token = ANSWER_BY.set(time.monotonic() + ACTIONS_SECONDS - ACTIONS_MARGIN_SECONDS)
    try:
        result = await run(service, op, inp)
    finally:
        ANSWER_BY.reset(token)
    if isinstance(result, PageResult):
        return result.to_json()
    return fit_json(result, ACTIONS_RESPONSE_CHARS)


def _json_object(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object; no body (or `null`) is an empty one."""
    if not body.strip():
        return {}
    try:
        parsed = json.loads(body)
    except ValueError:
        raise InvalidArgumentError("the body is not valid JSON") from None
    except RecursionError:
        # The parser recurses per level: `[[[[…` deep enough runs out of stack, which is the
        # client's malformed input, not the gateway's failure.
        raise InvalidArgumentError("the body's JSON nests too deeply") from None
    if parsed is None:
        return {}
    if not isinstance(parsed, dict):
        raise InvalidArgumentError("the body must be a JSON object")
    return parsed


def endpoint(server: OperationServer) -> Callable[..., Awaitable[Any]]:
    """A function whose signature documents the operation's route to FastAPI (OpenAPI); it is
    never called: `OperationRoute` serves the route through `server`."""
    op, rest = server.op, server.rest
    params = []
    annotation: Any
    for name in op.path_params:
        info = op.input.model_fields[name]
        annotation = Annotated[
            str, Path(description=info.description, pattern=path_pattern(op, name))
        ]
        params.append(
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation)
        )
    if rest is not None:
        if takes_query(op):
            annotation = Annotated[rest, Query()]
            params.append(
                inspect.Parameter("params", inspect.Parameter.KEYWORD_ONLY, annotation=annotation)
            )
        elif any(f.is_required() for f in rest.model_fields.values()):
            annotation = Annotated[rest, Body()]
            params.append(
                inspect.Parameter("params", inspect.Parameter.KEYWORD_ONLY, annotation=annotation)
            )
        else:  # every field has a default: the body may be left out entirely (not required),
            # and its schema stays a plain reference rather than `anyOf [$ref, null]`
            annotation = Annotated[rest, Body()]
            params.append(
                inspect.Parameter(
                    "params", inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=None
                )
            )

    async def documented(**kwargs: Any) -> Any:
        raise AssertionError("operation routes are served by OperationRoute")

    documented.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    documented.__name__ = op.name
    documented.server = server  # type: ignore[attr-defined]
    return documented


class OperationRoute(APIRoute):
    """A route whose endpoint signature describes the operation to OpenAPI, while the requests
    that reach it go to the operation's server."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        server: OperationServer = cast(Any, self.endpoint).server

        async def serve(request: Request) -> Response:
            if server.op.raw is not None:
                return await serve_raw(request)
            body = b"" if server.in_query else await request.body()
            text = await server(request.query_params, body, request.path_params)
            return Response(text, media_type="application/json")

        async def serve_raw(request: Request) -> Response:
            raw = server.op.raw
            body = request.stream() if raw is not None and raw.request_media else _no_body()
            answer = await server.raw(
                request.query_params, body, request.path_params, request.headers
            )
            if isinstance(answer, str):
                return Response(answer, media_type="application/json")
            return bytes_response(answer)

        return serve


async def _no_body() -> AsyncIterator[bytes]:
    return
    yield  # an async generator that yields nothing


class _Streamed(StreamingResponse):
    """A streamed answer that runs its reply's `close` however the response ends: sent,
    failed, or abandoned by the client before its first byte (when the body's generator never
    starts, and so never reaches a `finally` of its own)."""

    def __init__(self, reply: RawReply, headers: dict[str, str]) -> None:
        super().__init__(reply.chunks, media_type=reply.media_type, headers=headers)
        self.close = reply.close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.close is not None:
                await self.close()


def bytes_response(reply: RawReply) -> StreamingResponse:
    """`reply` streamed with its length (clients show progress) and a file name to save as."""
    headers = {"Content-Length": str(reply.length)}
    if reply.filename:
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in reply.filename)
        headers["Content-Disposition"] = f'attachment; filename="{safe or "download"}"'
    return _Streamed(reply, headers)


def raw_openapi(op: Operation) -> dict[str, Any]:
    """What OpenAPI says of a raw route beyond its signature: the body's and answer's bytes."""
    raw = op.raw
    if raw is None:
        return {}
    binary = {"schema": {"type": "string", "format": "binary"}}
    extra: dict[str, Any] = {}
    if raw.request_media:
        extra["requestBody"] = {
            "required": True,
            "content": {media: binary for media in raw.request_media},
        }
    if raw.response_media:
        extra["responses"] = {"200": {"content": {m: binary for m in raw.response_media}}}
    return extra
