"""Test helpers for the service tests: a driver double that records calls, and a uvicorn server
on an ephemeral loopback port.

The double knows no workspaces; it exists only to prove what did or did not reach a driver.
It is never a stand-in for the product (the end-to-end tests use the real local driver).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import uvicorn
from modal_workspace_core.drivers.base import WorkspaceRecord, WorkspaceSpec
from modal_workspace_core.errors import NotFoundError
from modal_workspace_core.shared_store import SqliteStore

TOKEN = "test-token-0123456789abcdef"
OTHER_TOKEN = "second-token-fedcba9876543210"


class RecordingDriver:
    """Records every call; holds no workspaces, so every lookup is a 404."""

    name = "recording"
    hidden_paths: tuple[str, ...] = ()

    def __init__(self, shared_store: Path | None = None) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.shared_store = SqliteStore(shared_store or Path(tempfile.mkdtemp()) / "shared.sqlite3")

    async def create(self, workspace_id: str, spec: WorkspaceSpec) -> WorkspaceRecord:
        self.calls.append(("create", (workspace_id, spec)))
        raise AssertionError("the recording driver creates nothing")

    async def get(self, workspace_id: str) -> WorkspaceRecord:
        self.calls.append(("get", (workspace_id,)))
        raise NotFoundError(f"workspace {workspace_id} does not exist", field="workspace_id")

    async def list(self) -> list[WorkspaceRecord]:
        self.calls.append(("list", ()))
        return []

    async def set_tags(self, workspace_id: str, tags: dict[str, str]) -> WorkspaceRecord:
        self.calls.append(("set_tags", (workspace_id, tags)))
        raise NotFoundError(f"workspace {workspace_id} does not exist", field="workspace_id")

    async def connect(self, workspace_id: str) -> Any:
        self.calls.append(("connect", (workspace_id,)))
        raise AssertionError("the recording driver connects to nothing")

    async def destroy(self, workspace_id: str) -> None:
        self.calls.append(("destroy", (workspace_id,)))
        raise NotFoundError(f"workspace {workspace_id} does not exist", field="workspace_id")

    async def close(self) -> None:
        self.calls.append(("close", ()))

    def names(self) -> list[str]:
        return [name for name, _ in self.calls if name != "close"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """Runs `app` under uvicorn on 127.0.0.1 in a thread; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.to_thread(thread.join, 30)
