"""Previews on the Modal driver, with the real SDK against the test control plane: the ports a
workspace declares reach `Sandbox.create` as encrypted ports (Modal fixes them at create), its
record keeps them so a resume opens the same ones, `workspace_preview_url` answers the sandbox's
tunnel URL (`Sandbox.tunnels()`), and a port the workspace did not declare is refused before the
tunnels are asked for (one the core refuses, before any call to Modal at all)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.base import SnapshotSpec, WorkspaceSpec
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings
from modal_workspace_core.errors import InvalidArgumentError
from modal_workspace_core.policy import new_id
from modal_workspace_core.surfaces.python_client import Workspaces

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

ECHO_AGENT = Path(__file__).parent / "modal_control_plane" / "echo_agent.py"
IMAGE = "previews-test-image"


@pytest.fixture
async def driver(modal_control_plane: ControlPlane) -> AsyncIterator[ModalDriver]:
    modal_control_plane.publish_image(IMAGE, "im-previewstestimage000")
    driver = ModalDriver(
        ModalSettings(
            app_name="previews-tests",
            agent_command=(sys.executable, str(ECHO_AGENT)),
            default_image_name=IMAGE,
        )
    )
    yield driver
    await driver.close()


@pytest.fixture
async def workspaces(driver: ModalDriver, tmp_path: Path) -> AsyncIterator[Workspaces]:
    settings = load_settings(
        {"MODAL_WORKSPACE_DRIVER": "modal", "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "data")}
    )
    async with Workspaces(driver, settings=settings) as wss:
        yield wss


def _tunnel_calls(plane: ControlPlane) -> int:
    calls = plane.calls()
    return calls["SandboxGetTunnelsV2"] + calls["SandboxGetTunnels"]


async def test_declared_ports_open_tunnels_and_the_preview_url_is_the_tunnels(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    ws = await workspaces.create(ports=[8000, 3000, 8000])

    (sandbox,) = modal_control_plane.sandboxes()
    opened = [(p.port, p.unencrypted) for p in sandbox.definition.open_ports.ports]
    assert opened == [(8000, False), (3000, False)]
    assert ws.info.resources["ports"] == [8000, 3000]

    preview = await workspaces.call("workspace_preview_url", workspace_id=ws.id, port=3000)
    tunnel = f"https://{sandbox.sandbox_id[-10:].lower()}-3000.tunnel.modal.test"
    assert preview.model_dump() == {
        "url": tunnel,
        "port": 3000,
        "path": None,
        "expires_at": None,
    }
    assert _tunnel_calls(modal_control_plane) == 1


async def test_a_port_not_declared_is_refused_before_the_tunnels_are_asked_for(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    ws = await workspaces.create(ports=[8000])
    with pytest.raises(InvalidArgumentError) as refused:
        await workspaces.call("workspace_preview_url", workspace_id=ws.id, port=8001)
    assert refused.value.field == "port"
    assert "its ports: 8000" in refused.value.message
    assert _tunnel_calls(modal_control_plane) == 0

    # One the core refuses is refused before any call to Modal.
    before = modal_control_plane.calls()
    with pytest.raises(InvalidArgumentError) as refused:
        await workspaces.call("workspace_preview_url", workspace_id=ws.id, port=80)
    assert refused.value.field == "port"
    assert modal_control_plane.calls() == before


async def test_a_workspace_without_ports_opens_none(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    ws = await workspaces.create()
    (sandbox,) = modal_control_plane.sandboxes()
    assert list(sandbox.definition.open_ports.ports) == []
    assert "ports" not in ws.info.resources
    with pytest.raises(InvalidArgumentError) as refused:
        await workspaces.call("workspace_preview_url", workspace_id=ws.id, port=8000)
    assert "its ports: none" in refused.value.message


@pytest.mark.parametrize(
    ("ports", "block_network", "field"),
    [([80], False, "ports"), ([8000], True, "ports"), ("8000", False, "ports")],
)
async def test_bad_ports_are_refused_before_any_modal_call(
    driver: ModalDriver,
    modal_control_plane: ControlPlane,
    ports: object,
    block_network: bool,
    field: str,
) -> None:
    before = modal_control_plane.calls()
    spec = WorkspaceSpec(resources={"ports": ports}, block_network=block_network)
    with pytest.raises(InvalidArgumentError) as refused:
        await driver.create(new_id("ws"), spec)
    assert refused.value.field == field
    assert modal_control_plane.calls() == before


async def test_a_resume_opens_the_same_ports_on_its_new_sandbox(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec(resources={"ports": [8000]}))
    snapshot = await driver.snapshot(ws, SnapshotSpec(snapshot_id=new_id("sn")))

    await driver.resume(ws, snapshot)

    first, second = sorted(modal_control_plane.sandboxes(), key=lambda s: s.created_at)
    assert second.running and not first.running
    assert [p.port for p in second.definition.open_ports.ports] == [8000]
    # Its tunnel is the new sandbox's: the URL changed with it.
    url = await driver.preview_url(ws, 8000)
    assert url == f"https://{second.sandbox_id[-10:].lower()}-8000.tunnel.modal.test"
