"""Deployed Modal Functions and apps, opt-in: call, spawn, wait for and cancel a function's call,
look up and list apps, only for the `app/function` names the operator allowlists
(`MODAL_WORKSPACE_ALLOWED_FUNCTIONS`; empty, the default, turns every one of them off).

Every refusal (off, a name off the list, a bad id) comes before any Modal call. Arguments and
results are JSON only, and a result is bounded per surface by `max_result_chars`. Outside the
GPT Actions schema unless `MODAL_WORKSPACE_FUNCTIONS_IN_ACTIONS=1` (`ACTIONS_SWAP`).
"""

from __future__ import annotations

import json
import weakref
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field, JsonValue, model_validator

from .. import policy
from ..config import ALLOWED_FUNCTIONS_ENV
from ..errors import LimitError, PermissionDeniedError, core_refusal
from ..modal_functions import AppSummary, DeployedFunctions
from .machinery.fields import Input, Output, core_pattern
from .machinery.limits import Bound, Bounds
from .machinery.table import Declarations, Hints

if TYPE_CHECKING:
    from ..runtime.service import Service

declare = Declarations()

# Calling someone's code that reaches anything: open-world, not read-only, not idempotent.
CALL = Hints(read_only=False, destructive=True, idempotent=False, open_world=True)
# Reading Modal's view of apps and calls: read-only, but of the outside world.
READ_MODAL = Hints(read_only=True, destructive=False, idempotent=True, open_world=True)

# The encoded JSON of one call's arguments: below Modal's 2 MiB inline limit with room to spare
# (an asynchronous call's arguments over 8 KiB travel through a blob upload, which Modal does).
MAX_ARGS_CHARS = 64_000
MAX_RESULT_CHARS = 8_000_000
DEFAULT_RESULT_CHARS = 200_000
MAX_FUNCTION_WAIT = 600

# With MODAL_WORKSPACE_FUNCTIONS_IN_ACTIONS=1 these enter the GPT Actions schema and, to keep
# it within Actions' 30 operations, three operations an Actions client can do another way leave
# it (they stay in MCP and the Python API): stdin goes with workspace_exec's `stdin`, a file is
# removed by a command, a snapshot ends by its ttl_seconds. See `operations.actions_operations`.
# There, function_call with a short wait_seconds is the spawn; function_spawn and the apps stay
# in MCP and the Python API.
ACTIONS_SWAP: dict[str, str] = {
    "function_call": "workspace_realtime_exec_input",
    "function_call_get": "workspace_snapshot_delete",
    "function_call_cancel": "file_remove",
}

_RESULT_BOUNDS: Bounds = {
    "actions": {"wait_seconds": Bound(30, 25), "max_result_chars": Bound(80_000, 80_000)},
    "mcp": {"wait_seconds": Bound(45, 30), "max_result_chars": Bound(1_000_000)},
}

AppName = Annotated[
    str,
    AfterValidator(policy.modal_app_name),
    core_pattern(policy.modal_app_name_pattern()),
    Field(description="A deployed Modal app's name."),
]
FunctionName = Annotated[
    str,
    AfterValidator(policy.modal_function_name),
    Field(description="Its name in the app; APP/FUNCTION must be allowlisted."),
]
FunctionCallId = Annotated[
    str,
    AfterValidator(policy.function_call_id),
    core_pattern(policy.function_call_id_pattern()),
    Field(description="As function_spawn returns it."),
]
WaitSeconds = Annotated[
    float,
    Field(
        ge=0,
        le=MAX_FUNCTION_WAIT,
        description="For the result; then a call still running answers state running.",
    ),
]
MaxResultChars = Annotated[
    int,
    Field(
        ge=1024,
        le=MAX_RESULT_CHARS,
        description="Of the result's JSON; a larger one is refused (get it again with more).",
    ),
]
CallState = Literal["running", "succeeded", "failed", "timed_out", "expired"]


# --- inputs --------------------------------------------------------------------------------------


class FunctionRef(Input):
    app_name: AppName
    function_name: FunctionName


class FunctionArgs(FunctionRef):
    args: list[JsonValue] = Field(default_factory=list, description="Positional arguments (JSON).")
    kwargs: dict[str, JsonValue] = Field(
        default_factory=dict, description="Keyword arguments (JSON)."
    )

    @model_validator(mode="after")
    def _bounded(self) -> FunctionArgs:
        try:
            size = len(json.dumps([self.args, self.kwargs], ensure_ascii=False, allow_nan=False))
        except ValueError:
            raise ValueError("args and kwargs must be JSON (no NaN or infinities)") from None
        if size > MAX_ARGS_CHARS:
            raise ValueError(
                f"args and kwargs take {size} characters of JSON, over {MAX_ARGS_CHARS}: pass "
                "less (large data belongs in a volume or a workspace file)"
            )
        return self


class FunctionCallInput(FunctionArgs):
    wait_seconds: WaitSeconds = 60
    max_result_chars: MaxResultChars = DEFAULT_RESULT_CHARS


class CallRef(Input):
    function_call_id: FunctionCallId


class CallGet(CallRef):
    wait_seconds: WaitSeconds = 60
    max_result_chars: MaxResultChars = DEFAULT_RESULT_CHARS


class CallCancel(CallRef):
    terminate_containers: bool = Field(
        False, description="Also end the containers running it (other inputs there are retried)."
    )


class AppRef(Input):
    app_name: AppName


class AppListInput(Input):
    pass


# --- outputs -------------------------------------------------------------------------------------


class FunctionCallResult(Output):
    function_call_id: str = Field(description="The call's id: function_call_get reads it again.")
    function: str = Field(description="APP/FUNCTION.")
    state: CallState = Field(description="running, succeeded, failed, timed_out or expired.")
    result: JsonValue = Field(None, description="What the function returned, when it succeeded.")
    result_chars: int | None = Field(None, description="Characters of the result's JSON.")
    error: str | None = Field(None, description="Why it failed, timed out or expired.")


class FunctionSpawned(Output):
    function_call_id: str = Field(description="Follow it with function_call_get.")
    function: str = Field(description="APP/FUNCTION.")


class FunctionCallCancelled(Output):
    function_call_id: str
    function: str = Field(description="APP/FUNCTION.")
    cancelled: bool = True


class AppInfo(Output):
    app_id: str
    name: str
    description: str = ""
    functions: list[str] = Field(description="Every function of the app.")
    allowed_functions: list[str] = Field(description="Those this gateway lets you call.")


class AppListResult(Output):
    apps: list[AppInfo] = Field(description="The deployed apps that hold allowlisted functions.")
    truncated: bool = False


# --- handlers ------------------------------------------------------------------------------------

_DEPLOYED: weakref.WeakKeyDictionary[Service, DeployedFunctions] = weakref.WeakKeyDictionary()


def _deployed(svc: Service) -> DeployedFunctions:
    found = _DEPLOYED.get(svc)
    if found is None:
        found = _DEPLOYED[svc] = DeployedFunctions()
    return found


def _allowlist(svc: Service) -> tuple[str, ...]:
    allowed: tuple[str, ...] = svc.settings.allowed_functions
    if not allowed:
        raise PermissionDeniedError(
            "calling Modal Functions is off on this gateway: an operator turns it on by listing "
            f"APP/FUNCTION names in {ALLOWED_FUNCTIONS_ENV}"
        )
    return allowed


def _allowed(svc: Service, inp: FunctionRef) -> str:
    with core_refusal("function_name"):
        return policy.allowed_function(
            inp.app_name, inp.function_name, list(_allowlist(svc)), ALLOWED_FUNCTIONS_ENV
        )


def _apps(allowed: tuple[str, ...]) -> dict[str, list[str]]:
    apps: dict[str, list[str]] = {}
    for name in allowed:
        app, function = name.split("/", 1)
        apps.setdefault(app, []).append(function)
    return apps


async def _owner(svc: Service, call_id: str) -> str:
    """The allowlisted function that made `call_id`; a call of any other is refused as if it
    did not exist (no client learns which calls another function has)."""
    allowed = _allowlist(svc)
    owner = await _deployed(svc).owner(call_id, allowed)
    if owner is None:
        raise PermissionDeniedError(
            f"function_call_id: {call_id} is not a call of a function this gateway allows "
            f"({ALLOWED_FUNCTIONS_ENV})",
            field="function_call_id",
        )
    return owner


async def _result(
    svc: Service, call_id: str, function: str, wait: float, most: int
) -> FunctionCallResult:
    outcome = await _deployed(svc).get(call_id, wait)
    answer = FunctionCallResult(
        function_call_id=call_id,
        function=function,
        state=outcome.state,
        result=None,
        result_chars=None,
        error=outcome.error,
    )
    if outcome.state != "succeeded":
        return answer
    chars = len(json.dumps(outcome.result, ensure_ascii=False))
    if chars > most:
        raise LimitError(
            f"the result of {call_id} is {chars} characters of JSON, over max_result_chars "
            f"({most}): get it again with function_call_get and a larger max_result_chars (as "
            "far as this surface allows), or from the Python API",
            field="max_result_chars",
        )
    return answer.model_copy(update={"result": outcome.result, "result_chars": chars})


@declare(
    method="POST",
    path="/modal/function-calls",
    hints=CALL,
    summary="Call an allowlisted deployed Modal Function: JSON arguments in, its JSON result out.",
    limits="A call still running after wait_seconds answers state running: follow its "
    "function_call_id with function_call_get.",
    in_actions=False,
    bounds=_RESULT_BOUNDS,
)
async def function_call(svc: Service, inp: FunctionCallInput) -> FunctionCallResult:
    name = _allowed(svc, inp)
    call_id = await _deployed(svc).spawn(name, inp.args, inp.kwargs)
    return await _result(svc, call_id, name, inp.wait_seconds, inp.max_result_chars)


@declare(
    method="POST",
    path="/modal/function-spawns",
    hints=CALL,
    summary="Start a call of an allowlisted deployed Modal Function: its function_call_id, "
    "without waiting.",
    in_actions=False,
)
async def function_spawn(svc: Service, inp: FunctionArgs) -> FunctionSpawned:
    name = _allowed(svc, inp)
    call_id = await _deployed(svc).spawn(name, inp.args, inp.kwargs)
    return FunctionSpawned(function_call_id=call_id, function=name)


@declare(
    method="GET",
    path="/modal/function-calls/{function_call_id}",
    hints=READ_MODAL,
    summary="Get a function call's JSON result: waits up to wait_seconds, then state running if "
    "not yet done.",
    in_actions=False,
    bounds=_RESULT_BOUNDS,
)
async def function_call_get(svc: Service, inp: CallGet) -> FunctionCallResult:
    function = await _owner(svc, inp.function_call_id)
    return await _result(
        svc, inp.function_call_id, function, inp.wait_seconds, inp.max_result_chars
    )


@declare(
    method="DELETE",
    path="/modal/function-calls/{function_call_id}",
    hints=Hints(read_only=False, destructive=True, idempotent=True, open_world=True),
    summary="Cancel a function call of an allowlisted function.",
    in_actions=False,
)
async def function_call_cancel(svc: Service, inp: CallCancel) -> FunctionCallCancelled:
    function = await _owner(svc, inp.function_call_id)
    await _deployed(svc).cancel(inp.function_call_id, inp.terminate_containers)
    return FunctionCallCancelled(function_call_id=inp.function_call_id, function=function)


def _app_info(app: AppSummary, allowed: list[str]) -> AppInfo:
    return AppInfo(
        app_id=app.app_id,
        name=app.name,
        description=app.description[:2000],
        functions=list(app.functions)[:1000],
        allowed_functions=sorted(allowed),
    )


@declare(
    method="GET",
    path="/modal/apps/{app_name}",
    hints=READ_MODAL,
    summary="Describe a deployed Modal app: its functions, and those allowlisted.",
    in_actions=False,
)
async def app_get(svc: Service, inp: AppRef) -> AppInfo:
    apps = _apps(_allowlist(svc))
    if inp.app_name not in apps:
        raise PermissionDeniedError(
            f"app_name: no function of app {inp.app_name!r} is allowlisted "
            f"({ALLOWED_FUNCTIONS_ENV})",
            field="app_name",
        )
    return _app_info(await _deployed(svc).app(inp.app_name), apps[inp.app_name])


@declare(
    method="GET",
    path="/modal/apps",
    hints=READ_MODAL,
    summary="List the deployed Modal apps that hold allowlisted functions.",
    in_actions=False,
)
async def app_list(svc: Service, inp: AppListInput) -> AppListResult:
    apps = _apps(_allowlist(svc))
    listed = await _deployed(svc).apps()
    return AppListResult(
        apps=[_app_info(app, apps[app.name]) for app in listed if app.name in apps]
    )
