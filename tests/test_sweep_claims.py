"""One sweep however many gateways: each due lifecycle action is taken once, by the gateway that
claims it first in the shared store (`janitor.py`). Two sweeps run at the same instant over one
workspace whose safety snapshot is due; exactly one snapshot is taken and one note written. On
the local driver two sweeps of one service share its store; on Modal two gateways each have a
driver and a store of their own, joined only by the control plane's Volume."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import modal_workspace_core as mwc
import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_service_support import IMAGE, needs_container_paths
from modal_workspace_core.config import Settings, load_settings
from modal_workspace_core.janitor import CLAIMS, Janitor

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

# A lifetime of an hour with a safety margin of two: the safety snapshot is due at once.
DUE_NOW = {
    "MODAL_WORKSPACE_JANITOR_SECONDS": "0",
    "MODAL_WORKSPACE_SAFETY_MARGIN_SECONDS": "7200",
}
LIFETIME = {"timeout_seconds": 3600}


async def sweep_at_once(janitors: list[Janitor]) -> None:
    await asyncio.gather(*(j.sweep() for j in janitors))


def safety_snapshots(snapshots: list[dict[str, object]]) -> int:
    return sum(1 for s in snapshots if s["kind"] == "safety")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(
        {"MODAL_WORKSPACE_MCP_TOKEN": "sweep-token-0123456789", **DUE_NOW},
        data_root=tmp_path / "data",
    )


async def test_two_sweeps_at_once_take_a_due_snapshot_once(settings: Settings) -> None:
    async with mwc.Workspaces(settings=settings) as wss, wss.create(resources=LIFETIME) as ws:
        await sweep_at_once([Janitor(wss.service), Janitor(wss.service)])
        snapshots = (await ws.snapshot_list()).model_dump()["snapshots"]
        assert safety_snapshots(snapshots) == 1, snapshots
        notes = [n.action for n in (await ws.refresh()).lifecycle]
        assert notes == ["snapshot"], notes
        # The claim is in the shared store, under the workspace.
        assert await wss.service.shared_store.names(f"{CLAIMS}/{ws.workspace_id}")


@needs_container_paths
async def test_two_modal_gateways_sweeping_at_once_take_a_due_snapshot_once(
    modal_control_plane: ControlPlane, tmp_path: Path
) -> None:
    from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings

    modal_control_plane.publish_image(IMAGE, "im-sweepclaimsimage00000")
    settings = load_settings(
        {"MODAL_WORKSPACE_DRIVER": "modal", **DUE_NOW}, data_root=tmp_path / "data"
    )
    gateways: list[mwc.Workspaces] = []
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(2):
            driver = ModalDriver(ModalSettings(app_name="sweep-claims", default_image_name=IMAGE))
            gateways.append(
                await stack.enter_async_context(mwc.Workspaces(driver, settings=settings))
            )
        ws = await gateways[0].create(resources=LIFETIME)
        await sweep_at_once([Janitor(g.service) for g in gateways])
        snapshots = (await ws.snapshot_list()).model_dump()["snapshots"]
        assert safety_snapshots(snapshots) == 1, snapshots
        notes = [n.action for n in (await ws.refresh()).lifecycle]
        assert notes == ["snapshot"], notes
        await ws.terminate()
