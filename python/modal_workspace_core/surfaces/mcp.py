"""The MCP server: one tool per operation of the table, over streamable HTTP (stateless, SSE
responses), with structured output from the same models and the same error text as REST.

Built on the official SDK's low-level `Server`, so tool schemas come from our models and nothing
is declared twice; the FastAPI app mounts the returned ASGI app at `/mcp/`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
from collections.abc import AsyncIterator, Sequence
from typing import Any

import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from .. import __version__
from ..config import Settings
from ..errors import WorkspaceError
from ..operations import OPERATIONS, Operation, call, offered, operation, parse_request
from ..operations.machinery.fields import ImageAnswer
from ..runtime.call import PROGRESS, Reporter
from ..runtime.service import Service
from .tool_schema import InputSchemas, OutputSchemas

__all__ = ["INSTRUCTIONS", "McpEndpoint", "build_server", "tools"]

INSTRUCTIONS = """\
Remote workspaces: each is a machine whose files live under /workspace.
1. workspace_create (pass an idempotency_key to make retries safe) gives a workspace_id.
2. repo_clone clones a GitHub repository. It returns an exec_id: git runs in the background.
3. Follow any exec_id (repo_clone, repo_fetch, repo_checkout, workspace_realtime_exec_start) with
   workspace_realtime_exec_events. Start with cursor=0; each page returns next_cursor: pass it
   back as cursor and call again until done is true. wait_seconds (0-25) long-polls, so an empty
   page only means nothing new yet. If cursor_expired is true, older output was dropped and the
   page continues from first_seq. Never restart from 0 once you have a cursor.
4. workspace_exec runs a short command and waits for it (up to wait_seconds, 45 at most): a
   command still running then is answered with state running and its exec_id, and goes on;
   follow it as in 3. Output is capped (truncation flagged); error says why a command did not
   start. Use a realtime exec for anything long, then workspace_realtime_exec_input (stdin) or
   workspace_realtime_exec_cancel as needed.
5. file_read/file_write/file_edit/file_list/file_search work on paths under /workspace;
   file_patch applies a unified diff or an apply_patch envelope to several files, all or
   nothing; repo_status and repo_diff show what changed.
6. To deliver the work: repo_commit, then repo_push (a new branch agent/<workspace>/<branch> by
   default; its answer lists the commits and files it pushed: show them to the user), then
   repo_pull_request (a draft; asking again for the same branch answers the same one).
   workspace_terminate when finished.
File watches follow the same cursor loop with workspace_file_watch_events.
Any answer may carry resumed_from: the snapshot the call first resumed its suspended workspace from.
"""

_LOOPBACK_HOSTS = ["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"]
_LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


def _tool(op: Operation, inputs: InputSchemas, outputs: OutputSchemas) -> types.Tool:
    hints = op.hints
    return types.Tool(
        name=op.name,
        description=op.description,
        input_schema=inputs(op.input_for("mcp"), op.name),
        output_schema=outputs(op.output, op.name),
        annotations=types.ToolAnnotations(
            title=op.title,
            read_only_hint=hints.read_only,
            destructive_hint=hints.destructive,
            idempotent_hint=hints.idempotent,
            open_world_hint=hints.open_world,
        ),
    )


def tools(settings: Settings | None = None) -> list[types.Tool]:
    """Every operation's tool, or those a gateway with `settings` offers."""
    inputs, outputs = InputSchemas(), OutputSchemas()
    listed = OPERATIONS if settings is None else offered(settings)
    return [_tool(op, inputs, outputs) for op in listed]


def _error_result(err: WorkspaceError) -> types.CallToolResult:
    # The same text as the REST error body, so an agent reads one shape everywhere.
    text = json.dumps(err.to_dict())
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _progress_reporter(ctx: Any) -> Reporter | None:
    """Progress notifications for a call whose client asked for them (a progress token)."""
    meta = getattr(ctx, "meta", None) or {}
    token = meta.get("progress_token", meta.get("progressToken"))
    session = getattr(ctx, "session", None)
    if token is None or session is None:
        return None
    request_id = getattr(ctx, "request_id", None)
    rising = RisingProgress()

    async def report(progress: float, message: str) -> None:
        # Progress is a courtesy: a client that went away must not fail the command.
        with contextlib.suppress(Exception):
            await session.send_progress_notification(
                token,
                rising.next(progress),
                message=message,
                related_request_id=request_id,
            )

    return report


class RisingProgress:
    """MCP wants each progress value of a call above the one before. A call reports in phases,
    each counting from zero in its own unit (a fork: the snapshot's bytes, then the seconds its
    start took): a value below the phase's last starts a new phase, counted on from where the
    last one ended; a value that would not rise is nudged just above the last."""

    def __init__(self) -> None:
        self._raw = 0.0  # the phase's last value, as reported
        self._base = 0.0  # where the phase counts from
        self._sent = -1.0  # the last value sent

    def next(self, value: float) -> float:
        if value < self._raw:
            self._base = self._sent
        self._raw = value
        sent = self._base + value
        if sent <= self._sent:
            sent = math.nextafter(self._sent, math.inf)
        self._sent = sent
        return sent


def build_server(service: Service) -> Server[Any]:
    """The MCP server object (transport-free): tools/list and tools/call over the table."""
    listed = tools(service.settings)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        reset = PROGRESS.set(_progress_reporter(ctx))
        try:
            op = operation(params.name)
            inp = await parse_request(service, op, params.arguments or {}, "mcp")
            result = await call(service, op, inp)
        except WorkspaceError as err:
            return _error_result(err)
        finally:
            PROGRESS.reset(reset)
        data = result.model_dump(mode="json")
        content: list[types.ContentBlock] = [types.TextContent(text=json.dumps(data))]
        if isinstance(result, ImageAnswer):
            # A picture (a run's plot) goes as image content, which models with vision read.
            image = base64.b64encode(result.image).decode()
            content.insert(0, types.ImageContent(data=image, mime_type=result.media_type))
        return types.CallToolResult(content=content, structured_content=data)

    return Server(
        "modal-workspace",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def transport_security(host: str, allowed_hosts: Sequence[str]) -> TransportSecuritySettings:
    """The Host/Origin check against DNS rebinding: loopback names always, plus the public
    names a deployment configures (MODAL_WORKSPACE_ALLOWED_HOSTS). A server bound to a public
    address with no names configured cannot know its own name, so it relies on the bearer token."""
    loopback = host in ("127.0.0.1", "localhost", "::1")
    if not allowed_hosts and not loopback:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    extra_hosts = [h for name in allowed_hosts for h in (name, f"{name}:*")]
    extra_origins = [o for name in allowed_hosts for o in (f"https://{name}", f"http://{name}")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*_LOOPBACK_HOSTS, *extra_hosts],
        allowed_origins=[*_LOOPBACK_ORIGINS, *extra_origins],
    )


class McpEndpoint:
    """The ASGI app mounted at `/mcp/`. Each run of the app's lifespan gets a fresh session
    manager (the SDK's manager runs only once), so an app can be started more than once."""

    def __init__(
        self, service: Service, *, host: str = "127.0.0.1", allowed_hosts: Sequence[str] = ()
    ) -> None:
        self.server = build_server(service)
        self.security = transport_security(host, allowed_hosts)
        self.manager: StreamableHTTPSessionManager | None = None

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        # Stateless: any gateway container can answer any request. SSE responses let progress
        # notifications flow while a tool runs.
        manager = StreamableHTTPSessionManager(
            app=self.server, stateless=True, json_response=False, security_settings=self.security
        )
        async with manager.run():
            self.manager = manager
            try:
                yield
            finally:
                self.manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            # A GET opens the server-to-client SSE stream of a session; a stateless server has
            # nothing to send on it, and the SDK would hold it open for as long as the client
            # waits. The spec's answer for "no stream here" is 405.
            body = {
                "error": {
                    "code": "method_not_allowed",
                    "message": "this MCP endpoint is stateless: send requests with POST",
                }
            }
            await JSONResponse(body, status_code=405, headers={"Allow": "POST"})(
                scope, receive, send
            )
            return
        if self.manager is None:
            body = {"error": {"code": "upstream", "message": "the MCP endpoint is not running"}}
            await JSONResponse(body, status_code=503)(scope, receive, send)
            return
        await self.manager.asgi_app(scope, receive, send)
