"""Turns a partial servicer into a complete, counted one.

The SDK's own test helper (`patch_mock_servicer`) fills every RPC a servicer does not implement
with one that fails loudly (UNIMPLEMENTED, naming the call); on top of it every call, implemented
or not, is counted by name so tests can assert how many round trips an operation cost.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from modal._utils.grpc_testing import patch_mock_servicer

from .state import State

T = TypeVar("T", bound=type)


def serviced(cls: T) -> T:
    implemented = {
        name
        for name in dir(cls)
        if name[0].isupper()
        and inspect.isfunction(getattr(cls, name))
        and not getattr(getattr(cls, name), "__isabstractmethod__", False)
    }
    patch_mock_servicer(cls)
    for name in dir(cls):
        method = getattr(cls, name)
        if name[0].isupper() and inspect.isfunction(method):
            setattr(cls, name, _counted(name, method, name in implemented))
    return cls


def _counted(
    name: str, method: Callable[..., Awaitable[None]], implemented: bool
) -> Callable[..., Awaitable[None]]:
    @functools.wraps(method)
    async def call(self: Any, stream: Any) -> None:
        state: State = self.state
        state.calls[name] += 1
        if not implemented:
            state.unimplemented.append(name)
        await method(self, stream)

    return call
