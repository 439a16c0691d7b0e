"""Deployed Functions as the test control plane keeps them: a fake function whose behaviour the
test chooses (a Python callable run on the control plane's loop), and the calls the SDK makes
for `Function.from_name(...).spawn`, `FunctionCall.from_id(...).get/cancel` and app listing. A
mixin of the `ModalClient` servicer.

As Modal's containers do, a call answers in its input's data format: CBOR in, CBOR out; the
control plane refuses pickled input outright, so a test sees any pickle the client sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import cbor2
from google.protobuf import empty_pb2
from grpclib import GRPCError, Status
from modal_proto import api_pb2

from .deployed import DeployedFunction, FunctionCallRecord, FunctionsState, RawOutput
from .objects import request_of
from .sandboxes import v1_id

if TYPE_CHECKING:
    from .state import State

__all__ = ["FunctionsServicer", "RawOutput", "deploy"]

_CBOR = api_pb2.DATA_FORMAT_CBOR
_STATUS = api_pb2.GenericResult


def _ulid_like(prefix: str) -> str:
    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    return prefix + "-" + "".join(secrets.choice(alphabet) for _ in range(26))


def _output(
    record: FunctionCallRecord, result: api_pb2.GenericResult, data_format: int
) -> api_pb2.FunctionGetOutputsItem:
    return api_pb2.FunctionGetOutputsItem(
        result=result,
        idx=0,
        input_id=record.input_id,
        data_format=data_format,
        output_created_at=time.time(),
    )


async def _run(record: FunctionCallRecord) -> None:
    try:
        value = record.function.behaviour(*record.args, **record.kwargs)
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, RawOutput):
            success = _STATUS(status=_STATUS.GENERIC_STATUS_SUCCESS, data=value.data)
            record.output = _output(record, success, value.data_format)
        else:
            data = cbor2.dumps(value)
            success = _STATUS(status=_STATUS.GENERIC_STATUS_SUCCESS, data=data)
            record.output = _output(record, success, _CBOR)
    except asyncio.CancelledError:
        terminated = _STATUS(status=_STATUS.GENERIC_STATUS_TERMINATED, exception="cancelled")
        record.output = _output(record, terminated, api_pb2.DATA_FORMAT_UNSPECIFIED)
        raise
    except TimeoutError as exc:
        timeout = _STATUS(status=_STATUS.GENERIC_STATUS_TIMEOUT, exception=repr(exc))
        record.output = _output(record, timeout, _CBOR)
    except Exception as exc:
        # As a container answers a CBOR input's failure: the text, no pickled exception.
        failure = _STATUS(status=_STATUS.GENERIC_STATUS_FAILURE, exception=repr(exc))
        record.output = _output(record, failure, _CBOR)
    finally:
        record.done.set()


class FunctionsServicer:
    state: State

    @property
    def _functions(self) -> FunctionsState:
        return self.state.functions

    async def FunctionGet(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        function = self._functions.deployed.get((request.app_name, request.object_tag))
        if function is None:
            raise GRPCError(
                Status.NOT_FOUND,
                f"Lookup failed for Function '{request.object_tag}' "
                f"from the '{request.app_name}' app",
            )
        function_type = (
            api_pb2.Function.FUNCTION_TYPE_GENERATOR
            if function.generator
            else api_pb2.Function.FUNCTION_TYPE_FUNCTION
        )
        app_id = self.state.app_id(request.environment_name, function.app, True)
        await stream.send_message(
            api_pb2.FunctionGetResponse(
                function_id=function.function_id,
                handle_metadata=api_pb2.FunctionHandleMetadata(
                    function_name=function.name,
                    function_type=function_type,
                    supported_input_formats=list(function.input_formats),
                    supported_output_formats=list(function.output_formats),
                    app_id=app_id,
                ),
                function=api_pb2.FunctionData(
                    function_name=function.name,
                    function_type=function_type,
                    ranked_functions=[
                        api_pb2.FunctionData.RankedFunction(
                            rank=0, function=api_pb2.Function(function_name=function.name)
                        )
                    ],
                ),
            )
        )

    async def FunctionMap(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        function = self._functions.by_id(request.function_id)
        if len(request.pipelined_inputs) != 1:
            raise GRPCError(Status.INVALID_ARGUMENT, "one pipelined input per unary call")
        item = request.pipelined_inputs[0].input
        if item.data_format != _CBOR or item.data_format not in function.input_formats:
            raise GRPCError(
                Status.INVALID_ARGUMENT,
                f"this control plane takes CBOR input only (got data format {item.data_format})",
            )
        args, kwargs = cbor2.loads(item.args)
        record = FunctionCallRecord(
            call_id=_ulid_like("fc"),
            function=function,
            input_id=_ulid_like("in"),
            args=list(args),
            kwargs=dict(kwargs),
        )
        self._functions.calls[record.call_id] = record
        record.task = asyncio.get_running_loop().create_task(_run(record))
        await stream.send_message(
            api_pb2.FunctionMapResponse(
                function_call_id=record.call_id,
                pipelined_inputs=[
                    api_pb2.FunctionPutInputsResponseItem(
                        idx=0, input_id=record.input_id, input_jwt="jwt-" + record.input_id
                    )
                ],
                function_call_jwt="jwt-" + record.call_id,
            )
        )

    async def FunctionGetOutputs(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        record = self._functions.call(request.function_call_id)
        # The SDK asks for at most 55 s at a time; waiting here is what makes `get` a long-poll.
        if request.timeout > 0 and record.output is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(record.done.wait(), request.timeout)
        response = api_pb2.FunctionGetOutputsResponse(
            num_unfinished_inputs=0 if record.output is not None else 1
        )
        if record.output is not None:
            response.outputs.append(record.output)
        await stream.send_message(response)

    async def FunctionCallFromId(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        record = self._functions.call(request.function_call_id)
        app_id = self.state.app_id("", record.function.app, True)
        await stream.send_message(
            api_pb2.FunctionCallFromIdResponse(
                function_call_id=record.call_id,
                num_inputs=1,
                metadata=api_pb2.FunctionCallHandleMetadata(
                    app_id=app_id, function_id=record.function.function_id
                ),
            )
        )

    async def FunctionCallCancel(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        record = self._functions.call(request.function_call_id)
        record.cancelled = True
        if record.task is not None and not record.task.done():
            record.task.cancel()
            await asyncio.gather(record.task, return_exceptions=True)
        await stream.send_message(empty_pb2.Empty())

    async def AppList(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        environment = request.environment_name or "main"
        response = api_pb2.AppListResponse()
        for (env, name), app_id in sorted(self.state.apps.items()):
            if env != environment:
                continue
            response.apps.append(
                api_pb2.AppListResponse.AppListItem(
                    app_id=app_id,
                    name=name,
                    state=api_pb2.APP_STATE_DEPLOYED,
                    metadata=self.app_metadata(env, name, app_id),
                )
            )
        await stream.send_message(response)

    def app_metadata(self, environment: str, name: str, app_id: str) -> api_pb2.AppHandleMetadata:
        """An app's handle metadata: its deployed functions by name, as Modal answers a lookup."""
        functions = {
            fn.name: fn.function_id
            for (app, _), fn in self._functions.deployed.items()
            if app == name
        }
        return api_pb2.AppHandleMetadata(
            app_id=app_id,
            environment_name=environment or "main",
            functions=functions,
            lifecycle=api_pb2.AppLifecycle(app_state=api_pb2.APP_STATE_DEPLOYED),
        )


def deploy(
    state: State,
    app: str,
    name: str,
    behaviour: Callable[..., Any],
    **options: Any,
) -> DeployedFunction:
    """Deploys the fake function `app/name` (and its app)."""
    state.app_id("", app, True)
    function = DeployedFunction(app, name, v1_id("fu"), behaviour, **options)
    state.functions.deployed[(app, name)] = function
    return function
