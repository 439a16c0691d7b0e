"""The Python API: `async with mwc.Workspaces() as wss, wss.create() as ws: ...`, in-process over
the same service and operation table as REST and MCP.

Every workspace-scoped operation is a method of `Workspace`, generated from the table (the
`workspace_` prefix dropped: `ws.realtime_exec_start(...)`, `ws.file_read(...)`), with the
operation's fields as its parameters: required fields first, then the optional ones, each in the
order the input model declares it, positionally or by keyword (`help(ws.file_read)` lists them).

A client cleans up after itself: leaving `async with Workspaces()` terminates the workspaces
created through it, and leaving `async with wss.create()` terminates that one, also when the
block raised; `create(keep=True)` (or `ws.keep()`) leaves a workspace running for later.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import operator
import os
import types
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Annotated, Any, Union, cast

from pydantic import BaseModel

from ..config import Settings, load_settings
from ..drivers import Driver
from ..errors import InvalidArgumentError, NotFoundError
from ..janitor import start_sweep
from ..operations import (
    OPERATIONS,
    Operation,
    call,
    new_service,
    open_service,
    operation,
    parse_request,
)
from ..operations import artifact_transfer as transfer
from ..operations.artifacts import (
    ArtifactDownload,
    ArtifactListing,
    ArtifactUpload,
    ArtifactUploadResult,
)
from ..operations.artifacts import upload as upload_artifact
from ..operations.execs import ExecResult
from ..operations.machinery.fields import MAX_WAIT_SECONDS
from ..operations.machinery.pages import Event, EventPage
from ..operations.workspace_info import Workspace as WorkspaceInfo
from ..operations.workspaces import TerminateResult, WorkspaceListResult
from ..path_view import shown
from ..runtime.service import Service

__all__ = ["Workspace", "WorkspaceCreation", "Workspaces"]

_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
_KEYWORD = inspect.Parameter.KEYWORD_ONLY


class Workspaces:
    """The entry point: a service over one driver (the local driver unless told otherwise).

    Use it as `async with Workspaces() as wss:`. On leaving the block, also through an
    exception, it terminates every workspace it created, except those created with
    `keep=True` or kept since with `ws.keep()`; workspaces found with `get` or `list` are
    never terminated on their own. A workspace returned for an `idempotency_key` counts as
    created here, whoever made it first: pass `keep=True` to reuse one across runs.
    """

    def __init__(
        self,
        driver: Driver | str | None = None,
        *,
        data_root: str | Path | None = None,
        settings: Settings | None = None,
    ) -> None:
        name = driver if isinstance(driver, str) else None
        self._settings = settings or load_settings(driver=name, data_root=data_root)
        self._driver = driver if driver is not None and not isinstance(driver, str) else None
        self._owns_driver = self._driver is None
        self._service: Service | None = None
        # Workspaces this client terminates on exit, by id (an idempotent create that returns
        # the same workspace twice is still one workspace to terminate).
        self._owned: dict[str, Workspace] = {}

    async def __aenter__(self) -> Workspaces:
        self._service = (
            new_service(self._driver, self._settings)
            if self._driver is not None
            else open_service(self._settings)
        )
        # While the block runs, its workspaces' lifetimes and idle limits hold as on a server.
        start_sweep(self._service)
        self._service.keep_warm()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._service is None:
            return
        try:
            owned = list(self._owned.values())
            failures = await _terminate_all(owned)
            _report(failures, exc)
        finally:
            await self._service.close(close_driver=self._owns_driver)
            self._service = None

    @property
    def service(self) -> Service:
        if self._service is None:
            raise RuntimeError("use Workspaces inside 'async with'")
        return self._service

    async def call(self, name: str, /, **args: Any) -> BaseModel:
        """Any operation of the table by name, e.g. `await wss.call("workspace_list")`."""
        op = operation(name)
        return await call(self.service, op, await parse_request(self.service, op, args))

    def create(self, *args: Any, keep: bool = False, **kwargs: Any) -> WorkspaceCreation:
        # The signature and documentation are the operation's (set below, from the table).
        bound = _bind(_CREATE, args, kwargs)
        return WorkspaceCreation(self._create(bound, keep), self)

    async def _create(self, args: dict[str, Any], keep: bool) -> Workspace:
        info = cast(WorkspaceInfo, await self.call("workspace_create", **args))
        ws = Workspace(self, info)
        if keep:
            self._owned.pop(ws.id, None)
        else:
            self._owned[ws.id] = ws
        return ws

    async def get(self, workspace_id: str) -> Workspace:
        """An existing workspace by id (not terminated when this client exits)."""
        info = await self.call("workspace_get", workspace_id=workspace_id)
        return Workspace(self, cast(WorkspaceInfo, info))

    async def list(self) -> list[Workspace]:
        """Every workspace that has not been terminated (none terminated when this exits)."""
        found = cast(WorkspaceListResult, await self.call("workspace_list"))
        return [Workspace(self, info) for info in found.workspaces]


class WorkspaceCreation:
    """What `Workspaces.create(...)` returns: await it for the `Workspace`, or enter it
    (`async with wss.create() as ws:`) to have that workspace terminated when the block ends,
    also through an exception, unless it was created with `keep=True` or kept with `ws.keep()`.

    Like a coroutine it runs once: awaiting it twice is an error, not a second workspace.
    """

    def __init__(self, creating: Awaitable[Workspace], owner: Workspaces) -> None:
        self._creating = creating
        self._owner = owner
        self._workspace: Workspace | None = None

    def __await__(self) -> Generator[Any, None, Workspace]:
        return self._creating.__await__()

    async def __aenter__(self) -> Workspace:
        self._workspace = await self._creating
        return self._workspace

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        ws, self._workspace = self._workspace, None
        if ws is not None and ws.id in self._owner._owned:
            _report(await _terminate_all([ws]), exc)


class Workspace:
    """One workspace: `workspace_id` is its id (`id` the same), `info` what the service last
    said about it."""

    def __init__(self, owner: Workspaces, info: WorkspaceInfo) -> None:
        self._owner = owner
        self.info = info
        # Named as every operation and answer names it (`info.workspace_id`).
        self.workspace_id = info.workspace_id

    @property
    def id(self) -> str:
        """The same as `workspace_id`."""
        return self.workspace_id

    def __repr__(self) -> str:
        return f"Workspace({self.id!r}, state={self.info.state!r})"

    if TYPE_CHECKING:
        # The methods generated from the table (at the end of this module) exist only at run
        # time: to a type checker each is a call whose awaited result is the operation's model.
        def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]: ...

    async def _call(self, name: str, args: Mapping[str, Any]) -> Any:
        if "workspace_id" in args:
            raise InvalidArgumentError(
                f"{_method_name(name)}: workspace_id is this workspace's own ({self.id})",
                field="workspace_id",
            )
        return await self._owner.call(name, workspace_id=self.id, **args)

    def keep(self) -> None:
        """Leaves this workspace running when its client (or its `async with`) exits."""
        self._owner._owned.pop(self.id, None)

    async def refresh(self) -> WorkspaceInfo:
        """Reads the workspace's state, tags and resources again into `info`."""
        self.info = await self._call("workspace_get", {})
        return self.info

    async def terminate(self) -> TerminateResult:
        """Terminate the workspace and everything running in it (its files are deleted)."""
        result: TerminateResult = await self._call("workspace_terminate", {})
        self._owner._owned.pop(self.id, None)
        return result

    async def exec(self, *args: Any, **kwargs: Any) -> ExecResult:
        result: ExecResult = await self._call(
            "workspace_exec", _bind(_GENERATED["workspace_exec"], args, kwargs)
        )
        return result

    async def follow(
        self, exec_id: str, *, cursor: int = 0, wait_seconds: float = MAX_WAIT_SECONDS
    ) -> AsyncIterator[Event]:
        """Yields an exec's events from `cursor` until its final event has been delivered."""
        while True:
            page: EventPage = await self._call(
                "workspace_realtime_exec_events",
                {"exec_id": exec_id, "cursor": cursor, "wait_seconds": wait_seconds},
            )
            for event in page.events:
                yield event
            cursor = page.next_cursor
            if page.done:
                return

    async def download_artifact(self, path: str, dest: str | os.PathLike[str]) -> ArtifactListing:
        """Downloads `path` of the workspace to the local file `dest`: a file's bytes, or a
        directory as a tar (extract it with `tarfile`, `filter="data"`). Returns the listing
        (its `download_url` is None in-process: there is no gateway to serve it)."""
        op = operation("artifact_download")
        svc = self._owner.service
        inp = await parse_request(svc, op, {"workspace_id": self.id, "path": path})
        listing = cast(ArtifactListing, await call(svc, op, inp))
        try:
            reply = await transfer.download(svc, self.id, cast(ArtifactDownload, inp).path)
            await transfer.write_to(reply, Path(dest))
        except Exception as exc:
            raise svc.caller_error(exc) from None
        return listing

    async def upload_artifact(
        self, src: str | os.PathLike[str], path: str, *, overwrite: bool = False
    ) -> ArtifactUploadResult:
        """Uploads the local file `src` to `path`, or the local directory `src` as a tree at
        `path` (sent as a tar), streamed in chunks; all of it lands or nothing. Something at
        `path` is replaced only with `overwrite`."""
        op = operation("artifact_upload")
        svc = self._owner.service
        args = {"workspace_id": self.id, "path": path, "overwrite": overwrite}
        inp = cast(ArtifactUpload, await parse_request(svc, op, args))
        body, fmt = await transfer.local_chunks(Path(src))
        try:
            result = await upload_artifact(svc, inp, body, fmt)
        except Exception as exc:
            raise svc.caller_error(exc) from None
        return cast(ArtifactUploadResult, shown(result, await svc.root(self.id)))

    async def exec_stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Event]:
        """Starts a command as a realtime exec and yields its events until it has ended.

        Takes what `realtime_exec_start` takes (`command` first).
        """
        start = _bind(_GENERATED["workspace_realtime_exec_start"], args, kwargs)
        status = await self._call("workspace_realtime_exec_start", start)
        async for event in self.follow(status.exec_id):
            yield event


# --- signatures from the table -----------------------------------------------------------------


class _Parameters(typing.NamedTuple):
    """A method's view of an operation: its name and the parameters it takes, in order."""

    name: str
    parameters: tuple[inspect.Parameter, ...]


def _method_name(op_name: str) -> str:
    return op_name.removeprefix("workspace_")


def _plain(annotation: Any) -> Any:
    """The type without pydantic's `Annotated` validators, as a reader of `help()` wants it."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _plain(args[0])
    if origin in (Union, types.UnionType):
        return functools.reduce(operator.or_, [_plain(a) for a in args])
    if isinstance(annotation, types.GenericAlias):
        return origin[tuple(_plain(a) for a in args)]
    return annotation


def _parameters(op: Operation, supplied: frozenset[str]) -> _Parameters:
    """The operation's fields but `supplied` (filled in by the object), required ones first,
    each group in the model's order: the order positional arguments fill them in."""
    fields = [(n, f) for n, f in op.input.model_fields.items() if n not in supplied]
    ordered = [x for x in fields if x[1].is_required()] + [
        x for x in fields if not x[1].is_required()
    ]
    parameters = tuple(
        inspect.Parameter(
            name,
            _POSITIONAL,
            default=(
                inspect.Parameter.empty
                if info.is_required()
                else info.get_default(call_default_factory=True)
            ),
            annotation=_plain(info.annotation),
        )
        for name, info in ordered
    )
    return _Parameters(_method_name(op.name), parameters)


def _bind(method: _Parameters, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments given, by field name. Only those given: the input model applies the
    defaults (and refuses unknown or missing fields, naming them, as REST and MCP do)."""
    if len(args) > len(method.parameters):
        names = ", ".join(p.name for p in method.parameters) or "none"
        raise InvalidArgumentError(
            f"{method.name} takes at most {len(method.parameters)} positional arguments "
            f"({names}), got {len(args)}"
        )
    bound = {p.name: value for p, value in zip(method.parameters, args, strict=False)}
    for name in kwargs.keys() & bound.keys():
        raise InvalidArgumentError(f"{method.name}: {name} given twice", field=name)
    return {**bound, **kwargs}


def _doc(op: Operation, method: _Parameters, extra: str, returns: str) -> str:
    lines = [op.description, ""]
    if method.parameters:
        lines.append("Arguments, in positional order (each also by keyword):")
        for p in method.parameters:
            info = op.input.model_fields[p.name]
            default = "" if p.default is inspect.Parameter.empty else f"Default {p.default!r}."
            text = " ".join(part for part in (info.description, default) if part)
            lines.append(f"    {p.name}: {text}".rstrip())
        lines += [*([extra] if extra else []), ""]
    lines.append(returns or f"Returns `{op.output.__name__}` (the `{op.name}` operation).")
    return "\n".join(lines)


def _describe(
    function: Callable[..., Any],
    op: Operation,
    method: _Parameters,
    *,
    returns: Any,
    extra: tuple[inspect.Parameter, ...] = (),
    note: str = "",
    returns_doc: str = "",
) -> None:
    """Gives `function` the operation's signature, annotations and documentation, so that
    `inspect.signature` and `help()` show its fields rather than `(*args, **kwargs)`."""
    self = inspect.Parameter("self", _POSITIONAL)
    parameters = (self, *method.parameters, *extra)
    function.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        parameters, return_annotation=returns
    )
    function.__annotations__ = {p.name: p.annotation for p in parameters[1:]} | {"return": returns}
    function.__doc__ = _doc(op, method, note, returns_doc)


def _generated(op: Operation, method: _Parameters) -> Callable[..., Awaitable[Any]]:
    async def generated(self: Workspace, *args: Any, **kwargs: Any) -> Any:
        return await self._call(op.name, _bind(method, args, kwargs))

    generated.__name__ = method.name
    generated.__qualname__ = f"Workspace.{method.name}"
    _describe(generated, op, method, returns=op.output)
    return generated


async def _terminate_all(workspaces: list[Workspace]) -> list[BaseException]:
    """Terminates them together; one already gone is not a failure. Returns the failures."""
    outcomes = await asyncio.gather(*(ws.terminate() for ws in workspaces), return_exceptions=True)
    failures = []
    for ws, outcome in zip(workspaces, outcomes, strict=True):
        if isinstance(outcome, NotFoundError):
            ws._owner._owned.pop(ws.id, None)
        elif isinstance(outcome, BaseException):
            failures.append(outcome)
    return failures


def _report(failures: list[BaseException], pending: BaseException | None) -> None:
    """Cleanup failures: noted on the exception already on its way out of the block (never
    hiding it), else raised, the first with the others noted on it."""
    notes = [f"terminating a workspace on exit failed: {f!r}" for f in failures]
    if pending is not None:
        for note in notes:
            pending.add_note(note)
        return
    if failures:
        first = failures[0]
        for note in notes[1:]:
            first.add_note(note)
        raise first


_WS_ONLY = frozenset({"workspace_id"})
# Methods of `Workspace` with a body of their own: refresh and terminate keep `info` and the
# client's list of workspaces to terminate up to date, exec is typed for type checkers.
_HANDWRITTEN = {"workspace_get", "workspace_terminate", "workspace_exec"}
_GENERATED = {
    op.name: _parameters(op, _WS_ONLY)
    for op in OPERATIONS
    if "workspace_id" in op.input.model_fields
}
_CREATE = _parameters(operation("workspace_create"), frozenset())

_describe(
    Workspaces.create,
    operation("workspace_create"),
    _CREATE,
    returns=WorkspaceCreation,
    extra=(inspect.Parameter("keep", _KEYWORD, default=False, annotation=bool),),
    note="    keep: leave it running when this client exits (keyword only). Default False.",
    returns_doc=(
        "Returns a `WorkspaceCreation`: await it for the `Workspace`, or enter it "
        "(`async with`) to terminate the workspace when the block ends."
    ),
)
_describe(
    Workspace.exec_stream,
    operation("workspace_realtime_exec_start"),
    _GENERATED["workspace_realtime_exec_start"],
    returns=AsyncIterator[Event],
    returns_doc="Yields the exec's events until its final one (the cursor loop of `follow`).",
)
_describe(
    Workspace.exec,
    operation("workspace_exec"),
    _GENERATED["workspace_exec"],
    returns=ExecResult,
)

for _op in OPERATIONS:
    if _op.name in _GENERATED and _op.name not in _HANDWRITTEN:
        setattr(Workspace, _method_name(_op.name), _generated(_op, _GENERATED[_op.name]))
