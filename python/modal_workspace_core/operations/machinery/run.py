"""Running an operation for a surface: its arguments parsed into the input model (as that
surface bounds it), the handler called, and the result shown as the workspace's commands see
its paths; any failure is a `WorkspaceError`."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from ...errors import InsufficientScopeError, InvalidArgumentError, validation_error
from ...path_view import shown
from ...policy import WORKSPACE_ROOT
from ...runtime.call import CALL, FULL_SCOPE, GRANT, Call
from .fields import Input, Output, path_fields
from .limits import Surface
from .pages import PageResult

if TYPE_CHECKING:
    from ...runtime.service import Service
    from .table import Operation

T = TypeVar("T")


def parse_input(
    op: Operation,
    args: Mapping[str, Any],
    surface: Surface = "python",
    root: str = WORKSPACE_ROOT,
) -> Input:
    """A client's arguments as the operation's input; paths may also name the workspace's
    `root` (see `path_view`)."""
    try:
        return op.input_for(surface).model_validate(dict(args), context={"root": root})
    except ValidationError as exc:
        raise validation_error(exc) from None


async def parse_request(
    service: Service, op: Operation, args: Mapping[str, Any], surface: Surface = "python"
) -> Input:
    """`parse_input`, knowing the root of the workspace the arguments name. Only a path that
    `/workspace` does not take, on a driver whose roots vary, costs a look at the workspace's
    record (by its id; the path never reaches the driver): every other refusal comes before the
    driver is asked anything."""
    try:
        return parse_input(op, args, surface)
    except InvalidArgumentError as err:
        if (err.field or "").partition(".")[0] not in path_fields(op.input):
            raise
        root = await service.root(args.get("workspace_id"))
        if root == WORKSPACE_ROOT:
            raise
    return parse_input(op, args, surface, root)


async def in_call(service: Service, work: Awaitable[T], current: Call | None = None) -> T:
    """Awaits `work` as one operation's call (`current`, else a new `Call`: the records it
    reads once, the resumes it made); any failure becomes the `WorkspaceError` a caller sees."""
    token = CALL.set(current if current is not None else Call())
    try:
        return await work
    except Exception as exc:
        raise service.caller_error(exc) from None
    finally:
        CALL.reset(token)


async def call(service: Service, op: Operation, inp: Input) -> BaseModel:
    """Runs a validated input through its handler; any failure becomes a `WorkspaceError`."""
    result = await run(service, op, inp)
    return result.model() if isinstance(result, PageResult) else result


def check_grant(op: Operation) -> None:
    """Refuses an operation that changes something to a caller whose OAuth token may only read.
    Every way an operation runs passes here (`run`, and REST's byte routes)."""
    granted = GRANT.get()
    if granted is not None and FULL_SCOPE not in granted and not op.hints.read_only:
        raise InsufficientScopeError(
            f"{op.name} changes the workspace: it needs a token with the scope {FULL_SCOPE} "
            f"(this one has {' '.join(sorted(granted)) or 'none'})"
        )


async def run(service: Service, op: Operation, inp: Input) -> BaseModel | PageResult:
    """`call`, leaving a page as the handler made it (REST sends its JSON as it is)."""
    check_grant(op)
    workspace_id = getattr(inp, "workspace_id", None)
    current = Call()
    result = await in_call(service, op.handler(service, inp), current)
    if isinstance(result, PageResult):
        if not current.resumed:
            return result
        # Rare (the read resumed its workspace): the page as a model, to say so.
        return result.model().model_copy(update={"resumed_from": current.resumed[-1]})
    if not isinstance(result, op.output):
        result = op.output.model_validate(result)
    if current.resumed and isinstance(result, Output) and result.resumed_from is None:
        result = result.model_copy(update={"resumed_from": current.resumed[-1]})
    return shown(result, await service.root(workspace_id))
