"""Why a Modal workspace does not run, said to the caller: one whose agent cannot start (an
image without it) answers with the entrypoint's exit code and stderr, never a bare 404; it is
not resumed again and again. Against the test control plane with the real `modal` SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings
from modal_workspace_core.errors import ConflictError
from modal_workspace_core.surfaces.python_client import Workspaces

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

IMAGE = "no-agent-image"
# What an image without the agent does at start: the shell cannot find it.
NO_AGENT = ("sh", "-c", "echo 'sh: 1: mwc-agent: not found' >&2; exit 127")


@pytest.fixture
async def workspaces(
    modal_control_plane: ControlPlane, tmp_path: Path
) -> AsyncIterator[Workspaces]:
    modal_control_plane.publish_image(IMAGE, "im-noagentimage0000000")
    settings = load_settings(
        {"MODAL_WORKSPACE_DRIVER": "modal", "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "data")}
    )
    driver = ModalDriver(
        ModalSettings(
            app_name="failures",
            default_image_name=IMAGE,
            agent_command=NO_AGENT,
            agent_start_seconds=5,
        )
    )
    async with Workspaces(driver, settings=settings) as wss:
        yield wss
    await driver.close()


async def test_a_sandbox_that_exits_at_start_is_reported_with_its_reason(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    ws = await workspaces.create()
    with pytest.raises(ConflictError) as refused:
        await ws.exec("true")
    message = refused.value.message
    assert "failed to start" in message and "127" in message, message
    assert "mwc-agent: not found" in message, message
    info = await ws.refresh()
    assert info.state == "suspended"
    assert info.suspension is not None and info.suspension.reason == "failed_to_start"
    # Asked again, it says the same, and starts nothing new.
    made = len([s for s in modal_control_plane.sandboxes() if s.name == ws.id])
    with pytest.raises(ConflictError):
        await ws.exec("true")
    assert len([s for s in modal_control_plane.sandboxes() if s.name == ws.id]) == made
