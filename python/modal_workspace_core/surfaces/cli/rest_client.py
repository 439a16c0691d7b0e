"""The commands' client against a gateway's REST API: each operation's method and path come from
the operation table (`/api` + its path, its path fields filled in), its other fields go in the
query string or the JSON body as the route takes them, and a refusal comes back as the
`WorkspaceError` it was (`{"error": {"code", "message", "field"}}`).

The bearer token goes in the `Authorization` header only, and only to the configured URL: no
redirect is followed.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote

import httpx2

from ...errors import (
    ConflictError,
    InvalidArgumentError,
    LimitError,
    NotFoundError,
    PermissionDeniedError,
    TimeoutError_,
    UnauthenticatedError,
    UpstreamError,
    WorkspaceError,
)
from ...operations import Operation, operation
from ...operations.artifact_transfer import LocalBody
from ...operations.artifacts import TAR_TYPES
from .contract import Download

__all__ = ["RestClient"]

API = "/api"
# A long-poll waits up to 25 s on the gateway, and an agent's answer up to its timeout on top.
_TIMEOUT = httpx2.Timeout(connect=15.0, read=180.0, write=180.0, pool=15.0)
_RAW = "application/octet-stream"
# A refusal's class by its HTTP status (its code is kept as the gateway said it).
_BY_STATUS = {
    400: InvalidArgumentError,
    401: UnauthenticatedError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: LimitError,
    429: LimitError,
    502: UpstreamError,
    504: TimeoutError_,
}


class RestClient:
    """`Client` over HTTP: use it as `async with RestClient(url, token) as client:`."""

    def __init__(self, base_url: str, token: str) -> None:
        self.where = base_url
        self._http = httpx2.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=_TIMEOUT,
            follow_redirects=False,
        )

    async def __aenter__(self) -> RestClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._http.aclose()

    async def call(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        op = operation(name)
        url, rest = _route(op, args)
        if op.rest_query:
            request = self._http.build_request(op.method, url, params=_query(rest))
        else:
            request = self._http.build_request(op.method, url, json=rest)
        response = await self._send(request)
        answer = _answer(response)
        if not isinstance(answer, dict):
            raise UpstreamError(f"{name}: the gateway answered {response.status_code} without JSON")
        return answer

    async def upload(
        self, workspace_id: str, path: str, body: LocalBody, *, overwrite: bool
    ) -> dict[str, Any]:
        op = operation("artifact_upload")
        url, _ = _route(op, {"workspace_id": workspace_id})
        query = {"path": path, "overwrite": overwrite, "format": body.format}
        media = TAR_TYPES[0] if body.format == "tar" else _RAW
        # The length declared up front: the gateway refuses an upload over its bound before it
        # reads a byte, and a body sent in one piece needs no chunked encoding.
        headers = {"Content-Type": media, "Content-Length": str(body.size)}
        request = self._http.build_request(
            "PUT", url, params=_query(query), content=body.chunks, headers=headers
        )
        answer = _answer(await self._send(request))
        if not isinstance(answer, dict):
            raise UpstreamError("artifact_upload: the gateway answered without JSON")
        return answer

    @contextlib.asynccontextmanager
    async def download(self, workspace_id: str, path: str) -> AsyncIterator[Download]:
        op = operation("artifact_download")
        url, _ = _route(op, {"workspace_id": workspace_id})
        request = self._http.build_request(
            "GET", url, params={"path": path}, headers={"Accept": f"{TAR_TYPES[0]}, {_RAW}"}
        )
        response = await self._send(request, stream=True)
        try:
            if response.status_code != 200:
                await response.aread()
                _answer(response)
            media = response.headers.get("content-type", "").split(";")[0].strip()
            kind: Literal["file", "dir"] = "dir" if media in TAR_TYPES else "file"
            length = int(response.headers.get("content-length", "0"))
            yield Download(kind, length, self._chunks(response))
        finally:
            await response.aclose()

    async def _chunks(self, response: httpx2.Response) -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_bytes():
                yield chunk
        except httpx2.TransportError as exc:
            raise UpstreamError(
                f"the download from {self.where} broke off: {type(exc).__name__}"
            ) from None

    async def _send(self, request: httpx2.Request, *, stream: bool = False) -> httpx2.Response:
        try:
            return await self._http.send(request, stream=stream)
        except httpx2.TransportError as exc:
            raise UpstreamError(
                f"cannot reach the gateway at {self.where}: {type(exc).__name__}"
                f"{': ' + str(exc) if str(exc) else ''}"
            ) from None


def _route(op: Operation, args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The operation's URL with its path fields filled in, and its other fields."""
    path = op.path
    rest = dict(args)
    for name in op.path_params:
        value = rest.pop(name, None)
        if value is None:
            raise WorkspaceError("invalid_argument", f"{name}: missing", field=name)
        path = path.replace("{" + name + "}", quote(str(value), safe=""))
    return API + path, {k: v for k, v in rest.items() if v is not None}


def _query(fields: Mapping[str, Any]) -> dict[str, str]:
    """Fields as query parameters: every field a route takes there is a scalar."""
    return {
        name: ("true" if value else "false") if isinstance(value, bool) else str(value)
        for name, value in fields.items()
        if value is not None
    }


def _answer(response: httpx2.Response) -> Any:
    """The JSON of a 2xx answer; any other raises the error it carries."""
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    if response.is_success:
        return body
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        text = json.dumps(body)[:200] if body is not None else response.text[:200]
        raise UpstreamError(f"the gateway answered {response.status_code}: {text}")
    code, message = str(error.get("code", "error")), error["message"]
    field = error.get("field") if isinstance(error.get("field"), str) else None
    if response.status_code == 401:
        # The gateway's own word, and what to check on this side.
        message += " (check the token this client sends)"
    kind = _BY_STATUS.get(response.status_code)
    if kind is None:
        err = WorkspaceError(code, message, field)
        err.status = response.status_code
        raise err
    raise kind(code, message, field, status=response.status_code)
