"""The Python API: `async with mwc.Workspaces() as wss: ws = await wss.create()`, in-process
over the same service and operation table as REST and MCP.

Every workspace-scoped operation is a method of `Workspace`, generated from the table (the
`workspace_` prefix dropped: `ws.realtime_exec_start(...)`, `ws.file_read(...)`); positional
arguments fill the operation's required fields in order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import BaseModel

from . import results
from .config import Settings, load_settings
from .drivers import Driver, create_driver
from .errors import InvalidArgumentError
from .models import MAX_WAIT_SECONDS
from .service import OPERATIONS, Operation, Service, call, operation, parse_input

__all__ = ["Workspace", "Workspaces"]


class Workspaces:
    """The entry point: a service over one driver (the local driver unless told otherwise)."""

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

    async def __aenter__(self) -> Workspaces:
        driver = self._driver or create_driver(
            self._settings.driver,
            data_root=self._settings.data_root,
            host_ports=self._settings.host_ports,
            channel_secret=self._settings.channel_secret,
        )
        self._service = Service(driver, self._settings)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._service is not None:
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
        return await call(self.service, op, parse_input(op, args))

    async def create(self, **args: Any) -> Workspace:
        info = await self.call("workspace_create", **args)
        return Workspace(self, info)  # type: ignore[arg-type]

    async def get(self, workspace_id: str) -> Workspace:
        return Workspace(self, await self.call("workspace_get", workspace_id=workspace_id))  # type: ignore[arg-type]

    async def list(self) -> list[Workspace]:
        found = await self.call("workspace_list")
        return [Workspace(self, info) for info in found.workspaces]  # type: ignore[attr-defined]


class Workspace:
    """One workspace. `info` is what the service last said about it."""

    def __init__(self, owner: Workspaces, info: results.Workspace) -> None:
        self._owner = owner
        self.info = info
        self.id = info.workspace_id

    def __repr__(self) -> str:
        return f"Workspace({self.id!r}, state={self.info.state!r})"

    async def _call(self, name: str, args: dict[str, Any]) -> Any:
        return await self._owner.call(name, workspace_id=self.id, **args)

    async def refresh(self) -> results.Workspace:
        self.info = await self._call("workspace_get", {})
        return self.info

    async def terminate(self) -> results.TerminateResult:
        result: results.TerminateResult = await self._call("workspace_terminate", {})
        return result

    async def exec(self, command: str, **args: Any) -> results.ExecResult:
        """Runs `command` (bash -lc) to completion: exit code and capped output."""
        result: results.ExecResult = await self._call(
            "workspace_exec", {"command": command, **args}
        )
        return result

    async def follow(
        self, exec_id: str, *, cursor: int = 0, wait_seconds: float = MAX_WAIT_SECONDS
    ) -> AsyncIterator[results.Event]:
        """Yields an exec's events from `cursor` until its final event has been delivered."""
        while True:
            page: results.EventPage = await self._call(
                "workspace_realtime_exec_events",
                {"exec_id": exec_id, "cursor": cursor, "wait_seconds": wait_seconds},
            )
            for event in page.events:
                yield event
            cursor = page.next_cursor
            if page.done:
                return

    async def exec_stream(self, command: str, **args: Any) -> AsyncIterator[results.Event]:
        """Starts `command` as a realtime exec and yields its events until it has ended."""
        status = await self._call("workspace_realtime_exec_start", {"command": command, **args})
        async for event in self.follow(status.exec_id):
            yield event


_HANDWRITTEN = {"workspace_get", "workspace_terminate", "workspace_exec"}


def _method_name(op: Operation) -> str:
    return op.name.removeprefix("workspace_")


def _generated(op: Operation) -> Callable[..., Awaitable[Any]]:
    positional = [
        name
        for name, info in op.input.model_fields.items()
        if name != "workspace_id" and info.is_required()
    ]

    async def method(self: Workspace, *args: Any, **kwargs: Any) -> Any:
        if len(args) > len(positional):
            raise InvalidArgumentError(
                f"{_method_name(op)} takes at most {len(positional)} positional arguments "
                f"({', '.join(positional) or 'none'})"
            )
        kwargs.update(zip(positional, args, strict=False))
        return await self._call(op.name, kwargs)

    method.__name__ = _method_name(op)
    method.__qualname__ = f"Workspace.{method.__name__}"
    method.__doc__ = f"{op.description}\n\nReturns `{op.output.__name__}`; see `{op.name}`."
    return method


for _op in OPERATIONS:
    if "workspace_id" in _op.input.model_fields and _op.name not in _HANDWRITTEN:
        setattr(Workspace, _method_name(_op), _generated(_op))
