"""How an operation is declared: at its handler, with `@declare(...)` giving its route, hints,
summary and limits; the input and output models are read from the handler's annotations.

REST routes, MCP tools and the Python API's methods are generated from the declarations
(`operations.OPERATIONS`); none of them is written by hand per operation.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel

from .fields import Input
from .limits import Bounds, Surface, surface_model
from .pages import EventPage, PageResult

if TYPE_CHECKING:
    from ...runtime.service import Service

Method = Literal["GET", "POST", "PUT", "DELETE"]
# A handler answers its output model, or a page whose JSON REST sends as it is (`PageResult`).
Handler = Callable[["Service", Any], Awaitable[BaseModel | PageResult]]
H = TypeVar("H", bound=Callable[..., Awaitable[Any]])


@dataclass(frozen=True)
class Hints:
    """MCP tool annotations (every tool sets all four), and whether a person should confirm a
    call: GPT Actions asks before every call of a `consequential` operation, and never before
    the others (`x-openai-isConsequential`, set on every operation of its schema)."""

    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool
    consequential: bool = False


READ = Hints(read_only=True, destructive=False, idempotent=True, open_world=False)
WRITE = Hints(read_only=False, destructive=False, idempotent=False, open_world=False)
# Replaces what is there within the workspace: a file written, an exec cancelled, a checkout.
REWRITE = Hints(read_only=False, destructive=True, idempotent=True, open_world=False)
# Deletes something for good: a workspace, a snapshot, a file.
DESTROY = Hints(
    read_only=False, destructive=True, idempotent=False, open_world=False, consequential=True
)
# Sets a value: asking twice is asking once (a terminal's size, a sampling interval).
SETTING = Hints(read_only=False, destructive=False, idempotent=True, open_world=False)
RUN = Hints(read_only=False, destructive=True, idempotent=False, open_world=True)
NETWORK = Hints(read_only=False, destructive=False, idempotent=False, open_world=True)
# Changes what others see on GitHub: a push (which may replace a branch of the workspace's own).
PUBLISH = Hints(
    read_only=False, destructive=True, idempotent=False, open_world=True, consequential=True
)
# Opens something on GitHub once: asking again answers the same thing.
PUBLISH_ONCE = Hints(
    read_only=False, destructive=False, idempotent=True, open_world=True, consequential=True
)

# The REST paths of one workspace, one of its execs and one of its file watches (under /api).
WS = "/workspaces/{workspace_id}"
EX = WS + "/realtime-execs/{exec_id}"
FW = WS + "/file-watches/{watch_id}"


@dataclass(frozen=True)
class RawReply:
    """Bytes a REST route answers as they are, not as JSON: `chunks` streamed with
    `Content-Length: length` (so an HTTP client shows progress). `close` runs once the stream
    ends, however it ends (finished, failed or abandoned by the client); it must not wait on
    anything (it runs while the request is being cancelled): spawn what needs awaiting."""

    chunks: AsyncIterator[bytes]
    length: int
    media_type: str
    filename: str | None = None
    close: Callable[[], Awaitable[None]] | None = None


# Serves an operation's REST route in its byte form: the input (from the path and the query),
# the request body as it arrives (empty for a GET) and the request's headers; answers bytes, a
# model that REST answers as JSON like any other operation's, or None: the declared handler's
# answer, as JSON.
RawServer = Callable[
    ["Service", Any, AsyncIterator[bytes], Mapping[str, str]],
    Awaitable[BaseModel | RawReply | None],
]


@dataclass(frozen=True)
class RawRest:
    """An operation whose REST route carries raw bytes rather than JSON: every input comes from
    the path and the query, the body (when `request_media` is set) is the bytes, and the answer
    may be bytes (`response_media`). MCP and the Python API call the declared handler, which
    carries the same content as text."""

    serve: RawServer
    # The body's media types (documented; empty: the route takes no body) and the answer's.
    request_media: tuple[str, ...] = ()
    response_media: tuple[str, ...] = ()
    # The boolean query field that asks for the text form instead of bytes: the GPT Actions
    # schema requires it true there (Actions take only text).
    text_field: str | None = None


@dataclass(frozen=True)
class Operation:
    name: str
    summary: str  # one sentence, also the MCP tool's description and the REST summary
    method: Method
    path: str  # under /api
    input: type[Input]
    output: type[BaseModel]
    hints: Hints
    handler: Handler
    limits: str = ""  # appended to the description: the bounds a caller must know
    # What a person sees in a tool list (MCP's title): the summary's first clause by default.
    title: str = ""
    in_actions: bool = True
    # Per surface, the most (and the default) a numeric field takes there (see `surfaces`).
    bounds: Bounds = field(default_factory=dict)
    # Set when the REST route carries bytes, not JSON (`RawRest`).
    raw: RawRest | None = None
    # `input_for`'s models, made once per surface: every request asks for one.
    _inputs: dict[Surface, type[Input]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def input_for(self, surface: Surface) -> type[Input]:
        """The input model as `surface` validates it: the operation's, with its bounds there."""
        model = self._inputs.get(surface)
        if model is None:
            bounds = self.bounds.get(surface, {})
            model = self._inputs[surface] = surface_model(self.input, self.input.__name__, bounds)
        return model

    @property
    def path_params(self) -> tuple[str, ...]:
        return tuple(re.findall(r"{(\w+)}", self.path))

    @property
    def rest_query(self) -> bool:
        """Whether REST takes the inputs beyond the path from the query string: a GET's or a
        DELETE's, and every input of a route whose body is raw bytes."""
        return self.method in ("GET", "DELETE") or self.raw is not None

    @property
    def description(self) -> str:
        return f"{self.summary} {self.limits}".strip()


class Declarations:
    """One domain's operations, in the order they are declared. Use an instance as the
    decorator: `@declare(method="GET", path=WS, hints=READ, summary="...")` over
    `async def workspace_get(svc: Service, inp: WorkspaceRef) -> Workspace`."""

    def __init__(self) -> None:
        self.operations: list[Operation] = []

    def __call__(
        self,
        *,
        method: Method,
        path: str,
        hints: Hints,
        summary: str,
        limits: str = "",
        title: str = "",
        in_actions: bool = True,
        bounds: Bounds | None = None,
        raw: RawRest | None = None,
    ) -> Callable[[H], H]:
        def declare(handler: H) -> H:
            inp, output = _models_of(handler)
            self.operations.append(
                Operation(
                    name=handler.__name__,
                    summary=summary,
                    method=method,
                    path=path,
                    input=inp,
                    output=output,
                    hints=hints,
                    handler=handler,
                    limits=limits,
                    title=title or first_clause(summary),
                    in_actions=in_actions,
                    bounds=bounds or {},
                    raw=raw,
                )
            )
            return handler

        return declare


def first_clause(summary: str) -> str:
    """The summary up to its first colon, semicolon or full stop outside parentheses: "Create a
    workspace: a durable machine…" is titled "Create a workspace"."""
    depth = 0
    for i, char in enumerate(summary):
        depth += {"(": 1, ")": -1}.get(char, 0)
        ends = char in ":;" or (char == "." and summary[i + 1 : i + 2] in ("", " "))
        if depth == 0 and ends:
            return summary[:i].rstrip()
    return summary.rstrip()


def _models_of(handler: Callable[..., Any]) -> tuple[type[Input], type[BaseModel]]:
    """The input model (the handler's `inp`) and the output model (its return; a page is an
    `EventPage`), from its annotations in its own module's names."""
    annotations = handler.__annotations__
    scope = handler.__globals__

    def resolve(name: str) -> Any:
        value = annotations[name]
        return eval(value, scope) if isinstance(value, str) else value

    inp, output = resolve("inp"), resolve("return")
    if output is PageResult:
        output = EventPage
    if not (isinstance(inp, type) and issubclass(inp, Input)):
        raise TypeError(f"{handler.__name__}: `inp` must be annotated with an Input model")
    if not (isinstance(output, type) and issubclass(output, BaseModel)):
        raise TypeError(f"{handler.__name__}: the return must be annotated with an output model")
    return inp, output
