"""Experiments on the Modal driver: the real SDK against the test control plane, the real agent
in the sandbox. A run's record and its follower work over the agent channel as on the local
driver, and the record stays readable once the workspace was terminated (Modal keeps a snapshot
by default) and its sandbox is no longer listed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import cast

import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_control_plane.isolation import usable_bwrap
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings
from modal_workspace_core.operations.experiments import Experiment, ExperimentList
from modal_workspace_core.surfaces.python_client import Workspaces

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

IMAGE = "experiments-image"


async def test_a_run_on_modal_is_recorded_and_outlives_its_sandbox(
    modal_control_plane: ControlPlane, tmp_path: Path
) -> None:
    if not usable_bwrap():
        pytest.skip("bubblewrap does not work here (.ci/run installs it)")
    modal_control_plane.publish_image(IMAGE, "im-experimentsimage000")
    settings = load_settings(
        {
            "MODAL_WORKSPACE_DRIVER": "modal",
            "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "data"),
            "MODAL_WORKSPACE_JANITOR_SECONDS": "0",
        }
    )
    driver = ModalDriver(ModalSettings(app_name="experiments", default_image_name=IMAGE))
    async with Workspaces(driver, settings=settings) as wss:
        ws = await wss.create()
        started = cast(
            Experiment,
            await wss.call(
                "experiment_start",
                workspace_id=ws.id,
                command="echo '::metric loss=2'; sleep 1; echo '::metric loss=1'; exit 4",
                name="on modal",
            ),
        )
        async with asyncio.timeout(60):
            while (
                run := cast(
                    Experiment,
                    await wss.call("experiment_get", workspace_id=ws.id, run_id=started.run_id),
                )
            ).state == "running":
                await asyncio.sleep(0.3)
        assert (run.state, run.returncode, run.name) == ("finished", 4, "on modal")
        assert (run.metrics["loss"].count, run.metrics["loss"].last) == (2, 1.0)
        ended = await wss.call("workspace_terminate", workspace_id=ws.id)
        assert ended.model_dump()["snapshot_id"]
        modal_control_plane.forget_ended_sandboxes()
        listed = cast(ExperimentList, await wss.call("experiment_list", workspace_id=ws.id))
        assert [(r.run_id, r.state) for r in listed.runs] == [(started.run_id, "finished")]
    await driver.close()
    assert modal_control_plane.unimplemented == []
