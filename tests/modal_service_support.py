"""The Modal driver behind the service table (the Python API), on the test control plane: the
fixtures every test of what only the Modal driver does shares."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from modal_control_plane import ControlPlane
from modal_control_plane.isolation import usable_bwrap
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings
from modal_workspace_core.surfaces.python_client import Workspaces
from support.git_server import GitServer

__all__ = ["IMAGE", "allowed_secrets", "idle_seconds", "needs_container_paths", "workspaces"]

IMAGE = "service-test-image"
# The service sends container paths (`/workspace`) inside the protocol, where the control plane
# cannot translate them: sandboxes must see real container paths.
needs_container_paths = pytest.mark.skipif(
    not usable_bwrap(), reason="bubblewrap does not work here (.ci/run installs it)"
)


@pytest.fixture
def idle_seconds() -> float:
    return 60.0


@pytest.fixture
def allowed_secrets() -> str:
    return "github,openai"


@pytest.fixture
async def workspaces(
    modal_control_plane: ControlPlane,
    git_server: GitServer,
    tmp_path: Path,
    idle_seconds: float,
    allowed_secrets: str,
) -> AsyncIterator[Workspaces]:
    modal_control_plane.publish_image(IMAGE, "im-servicetestimage0000")
    # The values live in Modal only: the gateway's settings name the secrets, never hold them.
    modal_control_plane.add_secret("github", {"GH_TOKEN": git_server.token})
    modal_control_plane.add_secret("openai", {"OPENAI_API_KEY": "sk-modal-held"})
    settings = load_settings(
        {
            "MODAL_WORKSPACE_DRIVER": "modal",
            "MODAL_WORKSPACE_ALLOWED_SECRETS": allowed_secrets,
            "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "data"),
            **git_server.gateway_env,
            # The GitHub secret attached to the gateway (modal_app.py), not to sandboxes.
            "GH_TOKEN": git_server.token,
        }
    )
    assert not settings.secret_values
    driver = ModalDriver(
        ModalSettings(
            app_name="service-tests", default_image_name=IMAGE, channel_idle_seconds=idle_seconds
        )
    )
    async with Workspaces(driver, settings=settings) as wss:
        yield wss
    await driver.close()
