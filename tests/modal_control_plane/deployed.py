"""What the test control plane knows of deployed Functions and their calls (see `functions`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grpclib import GRPCError, Status
from modal_proto import api_pb2

_CBOR = api_pb2.DATA_FORMAT_CBOR
_PICKLE = api_pb2.DATA_FORMAT_PICKLE


@dataclass(frozen=True)
class RawOutput:
    """What a behaviour returns to answer with exactly these bytes in this format (for tests of
    what the client refuses: a pickle, CBOR that is not JSON)."""

    data: bytes
    data_format: int = _CBOR


@dataclass
class DeployedFunction:
    app: str
    name: str
    function_id: str
    # (args, kwargs) -> result; may be async; an exception is the call's failure.
    behaviour: Callable[..., Any]
    input_formats: tuple[int, ...] = (_PICKLE, _CBOR)
    output_formats: tuple[int, ...] = (_PICKLE, _CBOR)
    generator: bool = False


@dataclass
class FunctionCallRecord:
    call_id: str
    function: DeployedFunction
    input_id: str
    args: Any
    kwargs: Any
    task: asyncio.Task[None] | None = None
    output: api_pb2.FunctionGetOutputsItem | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: bool = False


@dataclass
class FunctionsState:
    deployed: dict[tuple[str, str], DeployedFunction] = field(default_factory=dict)
    calls: dict[str, FunctionCallRecord] = field(default_factory=dict)

    def by_id(self, function_id: str) -> DeployedFunction:
        for function in self.deployed.values():
            if function.function_id == function_id:
                return function
        raise GRPCError(Status.NOT_FOUND, f"Function {function_id} not found")

    def call(self, call_id: str) -> FunctionCallRecord:
        record = self.calls.get(call_id)
        if record is None:
            raise GRPCError(Status.NOT_FOUND, f"Function call {call_id} not found")
        return record
