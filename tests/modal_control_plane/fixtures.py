"""Pointing the Modal SDK at a test control plane, and the pytest fixture that does it.

The SDK keeps one client per process (and caches environments), so switching servers means
closing that client and clearing the caches first.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .server import ControlPlane


def reset_modal_client() -> None:
    """Close the SDK's per-process client and forget what it cached about the last server."""
    from modal._environments import ENVIRONMENT_CACHE
    from modal._utils.async_utils import synchronizer
    from modal.client import _Client

    client = _Client._client_from_env
    _Client._set_env_client(None)
    ENVIRONMENT_CACHE.clear()
    if client is not None:
        with contextlib.suppress(Exception):
            synchronizer._translate_out(client).close()


@contextlib.contextmanager
def use_control_plane(plane: ControlPlane, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Point the SDK (and any subprocess started with this environment) at `plane`."""
    for key, value in plane.sdk_env().items():
        monkeypatch.setenv(key, value)
    reset_modal_client()
    try:
        yield
    finally:
        reset_modal_client()


@contextlib.contextmanager
def short_root() -> Iterator[Path]:
    """A fresh directory with a short path: unix sockets inside sandboxes must fit in 108 bytes."""
    root = Path(tempfile.mkdtemp(prefix="mcp-", dir="/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def modal_control_plane(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[ControlPlane]:
    """A running control plane with the SDK pointed at it; stopped, sandboxes killed, after.
    `@pytest.mark.container_dirs("/workspace", …)` names the container directories a sandbox
    may write (the rest of its file system is the host's, read-only)."""
    marker = request.node.get_closest_marker("container_dirs")
    options = {"mapped_prefixes": tuple(marker.args)} if marker is not None else {}
    with short_root() as root:
        plane = ControlPlane(root, **options).start()
        try:
            with use_control_plane(plane, monkeypatch):
                yield plane
        finally:
            plane.stop()
