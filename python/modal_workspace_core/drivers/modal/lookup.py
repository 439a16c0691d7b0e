"""Finding a deployment's sandboxes in any state, with their tags, in as few calls as Modal allows.

`Sandbox.from_name` finds the running sandbox of a workspace (one call). An ended one is found
through the list call with `include_finished` (`SandboxListV2`, which covers V1 and V2
sandboxes): `Sandbox.from_name(include_terminated=True)` looks up V2 sandboxes only, so an
ended GPU (V1) workspace would read as never made, and `Sandbox.list` asks for running ones
only and drops the tags the answer carries. The list answer has each sandbox's tags and
result, so a workspace's records are read without a further call per sandbox.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import modal
from modal._utils.async_utils import synchronizer
from modal.client import _Client
from modal.sandbox._impl_v2 import SandboxImplV2
from modal_proto import api_pb2

from ...errors import core_refusal
from ...policy import check_id

__all__ = [
    "UNLISTED_END",
    "Current",
    "SandboxInfo",
    "checked_workspace_id",
    "image_exists",
    "latest_sandbox",
    "list_sandboxes",
    "on_sdk_loop",
]

T = TypeVar("T")


async def on_sdk_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Runs an SDK-internal coroutine on the SDK's own event loop (its thread), where its
    client and channels live; the public `.aio` calls do the same."""
    loop = synchronizer._get_loop(start=True)
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


async def _image_from_id(image_id: str) -> None:
    client = await _Client.from_env()
    await client._stub.ImageFromId(api_pb2.ImageFromIdRequest(image_id=image_id))


async def image_exists(image_id: str) -> None:
    """Asks Modal for the image (`ImageFromId`, the call `Image.from_id` makes when it is used:
    an `Image` cannot be hydrated on demand); raises the SDK's error when it cannot be had."""
    await on_sdk_loop(_image_from_id(image_id))


async def _list_page(request: api_pb2.SandboxListRequest) -> api_pb2.SandboxListResponse:
    client = await _Client.from_env()
    return await SandboxImplV2.list_page(client, request)


@dataclass(frozen=True)
class SandboxInfo:
    """One sandbox as the list call answers it."""

    sandbox_id: str
    created_at: float
    tags: dict[str, str]
    result: api_pb2.GenericResult | None  # None while it runs
    finished_at: float = 0.0  # when it ended, where Modal says

    @property
    def running(self) -> bool:
        return self.result is None

    async def handle(self) -> modal.Sandbox:
        return await modal.Sandbox.from_id.aio(self.sandbox_id)


async def list_sandboxes(
    app_id: str, tags: Mapping[str, str], *, include_finished: bool = True
) -> AsyncIterator[SandboxInfo]:
    """Every sandbox of the app with at least `tags`, running or (unless `include_finished` is
    false) ended, newest first, a page (one call) at a time."""
    wanted = [api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in tags.items()]
    before = 0.0
    while True:
        request = api_pb2.SandboxListRequest(
            app_id=app_id, include_finished=include_finished, tags=wanted, before_timestamp=before
        )
        response = await on_sdk_loop(_list_page(request))
        if not response.sandboxes:
            return
        for info in response.sandboxes:
            result = info.task_info.result if info.task_info.result.status else None
            yield SandboxInfo(
                sandbox_id=info.id,
                created_at=info.created_at,
                tags={t.tag_name: t.tag_value for t in info.tags},
                result=result,
                finished_at=info.task_info.finished_at,
            )
        before = response.sandboxes[-1].created_at


async def latest_sandbox(app_id: str, tags: Mapping[str, str]) -> SandboxInfo | None:
    """The newest sandbox with `tags` (a workspace's latest: the one holding its records)."""
    async for info in list_sandboxes(app_id, tags):
        return info
    return None


def checked_workspace_id(workspace_id: str) -> str:
    """The id a workspace is looked up by, checked by the core (a bad one is the caller's
    `invalid_argument`, naming the field)."""
    with core_refusal("workspace_id"):
        return check_id("ws", workspace_id)


# What a workspace's sandbox reads as once Modal no longer lists it: ended, how unknown.
UNLISTED_END = api_pb2.GenericResult(
    status=api_pb2.GenericResult.GENERIC_STATUS_TERMINATED,
    exception="its sandbox ended and Modal no longer lists it",
)


@dataclass
class Current:
    """A workspace's latest sandbox: a handle when one was needed, its tags, and its result
    (None while it runs)."""

    workspace_id: str
    sandbox: modal.Sandbox | None
    tags: dict[str, str]
    result: api_pb2.GenericResult | None
    info: SandboxInfo | None = None

    @property
    def running(self) -> bool:
        return self.result is None

    async def handle(self) -> modal.Sandbox:
        if self.sandbox is None:
            assert self.info is not None
            self.sandbox = await self.info.handle()
        return self.sandbox
