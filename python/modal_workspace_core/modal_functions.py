"""Deployed Modal Functions and apps, through the official SDK: spawn, wait for, cancel a call;
look up and list apps. Arguments go as CBOR and results come back as CBOR, never as pickles.

Not a driver's: workspaces live behind the driver contract, while these calls need only Modal
credentials in the gateway's environment, so they work on either driver (a local-driver
gateway with a Modal token calls functions as well as a Modal-deployed one). Which names may be
called is decided before this module is reached (`operations/functions.py`).

The Modal SDK is imported inside the functions that call it, on purpose: the operations import
this module on every gateway, and one that never calls a function never loads the SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any, Literal

from .errors import InvalidArgumentError, NotFoundError, UpstreamError, WorkspaceError

__all__ = ["AppSummary", "CallOutcome", "DeployedFunctions", "json_value"]

# What a remote exception's text may take in an answer.
MAX_ERROR_CHARS = 2_000
# How deep a result may nest: deeper is refused rather than walked.
MAX_DEPTH = 64

CallState = Literal["running", "succeeded", "failed", "timed_out", "expired"]


@dataclass(frozen=True)
class CallOutcome:
    state: CallState
    result: Any = None
    error: str | None = None


@dataclass(frozen=True)
class AppSummary:
    app_id: str
    name: str
    description: str
    functions: tuple[str, ...]


def json_value(value: Any, where: str = "result", depth: int = 0) -> Any:
    """`value` if it is JSON (null, booleans, finite numbers, text, lists, objects with text
    keys), else an error saying where it is not. CBOR can carry more than JSON (bytes, tags such
    as dates, non-text keys, NaN): those are refused, never converted by guesswork."""
    if depth > MAX_DEPTH:
        raise UpstreamError(f"the function's {where} nests deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UpstreamError(f"the function's {where} is {value!r}, which JSON cannot hold")
        return value
    if isinstance(value, list | tuple):
        return [json_value(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise UpstreamError(
                    f"the function's {where} has a key that is not text ({key!r:.40})"
                )
            out[key] = json_value(item, f"{where}.{key[:40]}", depth + 1)
        return out
    raise UpstreamError(
        f"the function's {where} is a {type(value).__name__}, not a JSON value: return JSON-able "
        "data (for bytes, base64 text)"
    )


def _impl(handle: Any) -> Any:
    """The SDK object behind a public handle (the synchronicity wrapper hides the fields below
    its public API; read only where the SDK offers no public way, as commented at each use)."""
    from modal._utils.async_utils import synchronizer

    return synchronizer._translate_in(handle)  # type: ignore[no-untyped-call]


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


@contextlib.asynccontextmanager
async def _sdk_errors(what: str) -> AsyncIterator[None]:
    import modal.exception

    try:
        yield
    except WorkspaceError:
        raise
    except modal.exception.NotFoundError:
        raise NotFoundError(f"{what} was not found at Modal (is it deployed?)") from None
    except modal.exception.Error as exc:
        raise UpstreamError(
            f"Modal failed for {what}: {type(exc).__name__}: {_bounded(str(exc))}"
        ) from None


async def _read_output(call: Any, wait_seconds: float) -> CallOutcome:
    """What `FunctionCall.get` does (`_Invocation.poll_function`), with the output's format
    checked before the SDK's deserializer sees it: that one unpickles whatever is pickled (a
    success's value, or a failure's exception), and the gateway never unpickles. The value is
    as CBOR decoded it (not yet checked to be JSON). Runs on the SDK's loop."""
    from modal._utils.function_utils import _process_result
    from modal_proto import api_pb2

    invocation = call._invocation()
    response = await invocation.pop_function_call_outputs(
        index=0, timeout=wait_seconds, clear_on_success=False
    )
    if not response.outputs:
        if response.num_unfinished_inputs == 0:
            return CallOutcome("expired", error="the call's result has expired at Modal")
        return CallOutcome("running")
    item = response.outputs[0]
    carries_data = item.result.WhichOneof("data_oneof") is not None
    if carries_data and item.data_format != api_pb2.DATA_FORMAT_CBOR:
        raise UpstreamError(
            f"function call {call.object_id} answered in data format {item.data_format}, not "
            "CBOR: refused (the gateway never unpickles)"
        )
    value = await _process_result(item.result, item.data_format, invocation.stub, invocation.client)
    return CallOutcome("succeeded", result=value)


async def _on_sdk_loop(coro: Coroutine[Any, Any, Any]) -> Any:
    """Awaits `coro` on the SDK's own event loop (a thread of its own), where its objects and
    their gRPC channels live: the SDK's public `.aio` methods do the same."""
    from modal._utils.async_utils import synchronizer

    loop = synchronizer._get_loop(start=True)
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


def _summary(name: str, info: Any) -> AppSummary:
    """An app as the SDK's `AppInfo` describes it."""
    return AppSummary(
        app_id=info.app_id,
        name=name,
        description=info.description,
        functions=tuple(sorted(info.functions)),
    )


class DeployedFunctions:
    """The SDK's handles of the allowlisted functions, hydrated once per process (a cache: a
    handle whose function is gone is dropped and looked up again)."""

    def __init__(self) -> None:
        self._handles: dict[str, Any] = {}

    @staticmethod
    def _use_cbor() -> None:
        # The SDK picks the arguments' format from its `payload_format` setting (default
        # pickle, `_utils/function_utils.py`, `_create_input`), and the function's container
        # answers in the format of its input; its public override sets it for this process,
        # which makes no pickled calls of its own.
        import modal.config

        modal.config.config.override_locally("payload_format", "cbor")

    async def _function(self, name: str) -> Any:
        import modal
        from modal_proto import api_pb2

        handle = self._handles.get(name)
        if handle is None:
            app, function = name.split("/", 1)
            handle = modal.Function.from_name(app, function)
            async with _sdk_errors(f"function {name}"):
                await handle.hydrate.aio()
            # `_metadata` is the SDK's only record of the formats the deployed function takes
            # (`FunctionHandleMetadata`); a function that cannot take and give CBOR would make
            # the SDK fall back to pickle, which is refused here.
            metadata = _impl(handle)._metadata
            cbor = api_pb2.DATA_FORMAT_CBOR
            if (
                metadata is None
                or cbor not in metadata.supported_input_formats
                or cbor not in metadata.supported_output_formats
            ):
                raise UpstreamError(
                    f"function {name} does not take CBOR arguments and results (deploy it with a "
                    "modal version that does); it is not called with pickles"
                )
            if metadata.function_type == api_pb2.Function.FUNCTION_TYPE_GENERATOR:
                raise InvalidArgumentError(f"function {name} is a generator: not offered")
            self._handles[name] = handle
        return handle

    async def spawn(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> str:
        """Starts a call of allowlisted `name` (`app/function`); returns its function-call id."""
        self._use_cbor()
        handle = await self._function(name)
        async with _sdk_errors(f"function {name}"):
            try:
                call = await handle.spawn.aio(*args, **kwargs)
            except Exception:
                self._handles.pop(name, None)
                raise
        return str(call.object_id)

    async def owner(self, call_id: str, allowed: tuple[str, ...]) -> str | None:
        """Which of the `allowed` functions made call `call_id`, or None (another function's, or
        no such call)."""
        import modal

        call = modal.FunctionCall.from_id(call_id)
        async with _sdk_errors(f"function call {call_id}"):
            # `num_inputs` is the public call that reads the call's metadata
            # (`FunctionCallFromId`); the function's id it learns is kept as `_function_id`.
            await call.num_inputs.aio()
        function_id = getattr(_impl(call), "_function_id", None)
        if not function_id:
            return None
        for name in allowed:
            with contextlib.suppress(WorkspaceError):
                if (await self._function(name)).object_id == function_id:
                    return name
        return None

    async def get(self, call_id: str, wait_seconds: float) -> CallOutcome:
        import modal
        import modal.exception

        call = modal.FunctionCall.from_id(call_id)
        async with _sdk_errors(f"function call {call_id}"):
            try:
                await call.hydrate.aio()  # no call: the handle only learns its client
                outcome: CallOutcome = await _on_sdk_loop(_read_output(_impl(call), wait_seconds))
            except modal.exception.FunctionTimeoutError as exc:
                return CallOutcome("timed_out", error=_bounded(str(exc)))
            except modal.exception.RemoteError as exc:
                return CallOutcome("failed", error=_bounded(str(exc)) or "the call failed")
        if outcome.state != "succeeded":
            return outcome
        return CallOutcome("succeeded", result=json_value(outcome.result))

    async def cancel(self, call_id: str, terminate_containers: bool) -> None:
        import modal

        call = modal.FunctionCall.from_id(call_id)
        async with _sdk_errors(f"function call {call_id}"):
            await call.cancel.aio(terminate_containers=terminate_containers)

    async def app(self, name: str) -> AppSummary:
        import modal

        async with _sdk_errors(f"app {name}"):
            app = await modal.App.lookup.aio(name, create_if_missing=False)
            return _summary(name, await app.info.aio())

    async def apps(self) -> list[AppSummary]:
        import modal

        async with _sdk_errors("the environment's apps"):
            listed = await modal.Environment.from_context().apps.list.aio()
        # Each handle carries its info from the list's answer: `info()` makes no call.
        return [_summary(app.name or "", await app.info.aio()) for app in listed]
