"""`modal_app.py`, the gateway's Modal deployment, checked in-process: it imports cleanly, defines
the app, the web function and its image, that image installs this project's wheel (proved by
building it against the local control plane, which records what the build would run), and the
web function serves the same routes as the gateway everywhere else."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2
import modal
import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.modal.channel_key import channel_key
from modal_workspace_core.service import Service
from modal_workspace_core.surfaces.rest.app import create_app
from service_support import TOKEN, RecordingDriver

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

MODAL_APP = Path(__file__).resolve().parents[1] / "modal_app.py"


@pytest.fixture
def wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "modal_workspace_core-0.1.0-cp311-cp311-linux_x86_64.whl"
    path.write_bytes(b"the project's wheel, as far as this test is concerned")
    monkeypatch.setenv("MODAL_WORKSPACE_WHEEL", str(path))
    return path


def _load(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """A fresh import of modal_app.py, as `modal deploy` does."""
    spec = importlib.util.spec_from_file_location("modal_app", MODAL_APP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "modal_app", module)
    spec.loader.exec_module(module)
    return module


def test_it_defines_the_app_and_one_web_function(
    wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _load(monkeypatch)

    assert isinstance(module.app, modal.App)
    assert module.app.name == "modal-workspace-mcp"
    assert isinstance(module.gateway, modal.Function)
    assert module.gateway._is_web_endpoint()
    (secret,) = module.gateway._spec_.secrets
    assert repr(secret) == "modal.Secret.from_name('modal-workspace-mcp')"


def test_the_app_name_and_secret_come_from_the_environment(
    wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODAL_WORKSPACE_APP_NAME", "my-gateway")
    monkeypatch.setenv("MODAL_WORKSPACE_SECRET", "my-gateway-token")

    module = _load(monkeypatch)

    assert module.app.name == "my-gateway"
    assert module.SECRET_NAME == "my-gateway-token"


def test_importing_without_a_wheel_says_how_to_build_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODAL_WORKSPACE_WHEEL", str(tmp_path / "missing.whl"))

    with pytest.raises(FileNotFoundError, match="MODAL_WORKSPACE_WHEEL"):
        _load(monkeypatch)


def test_the_gateway_image_installs_the_wheel(
    wheel: Path, monkeypatch: pytest.MonkeyPatch, modal_control_plane: ControlPlane
) -> None:
    module = _load(monkeypatch)
    app = modal.App.lookup("gateway-image-test", create_if_missing=True)

    image = module.gateway_image(wheel).build(app)

    state = modal_control_plane.state
    images = modal_control_plane.call(lambda: dict(state.images))
    commands = [c for record in images.values() for c in record.dockerfile_commands]
    remote = f"{module.WHEEL_DIR}/{wheel.name}"
    assert any(c.startswith("RUN pip install") and remote in c for c in commands)
    assert any(f"MODAL_WORKSPACE_WHEEL={remote}" in c for c in commands)
    assert any("MODAL_WORKSPACE_DRIVER=modal" in c for c in commands)
    assert wheel.read_bytes() in modal_control_plane.call(lambda: list(state.files.values()))
    assert image.object_id in images


def _paths(app: object) -> set[str]:
    return {getattr(route, "path", "") for route in getattr(app, "routes", [])}


async def test_the_web_function_serves_the_gateways_routes_on_the_modal_driver(
    wheel: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MODAL_WORKSPACE_MCP_TOKEN", "a-deployment-token")
    monkeypatch.setenv("MODAL_WORKSPACE_DATA_ROOT", str(tmp_path))
    module = _load(monkeypatch)
    import modal_workspace_core.service as service_module

    made: list[Any] = []
    create_driver = service_module.create_driver

    def recording(*args: Any, **kwargs: Any) -> Any:
        made.append(create_driver(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(service_module, "create_driver", recording)

    gateway = module.build_gateway()

    # Its workspaces' channel keys come from the deployment's token (a Modal container has no
    # Modal token secret of its own to fall back on).
    secret = load_settings({"MODAL_WORKSPACE_MCP_TOKEN": "a-deployment-token"}).channel_secret
    workspace = "ws-" + "0" * 32
    assert secret is not None
    assert made[0]._channel_key(workspace) == channel_key(secret, workspace)
    local = create_app(Service(RecordingDriver(), load_settings({})), [TOKEN])
    assert _paths(gateway) == _paths(local)
    assert {"/healthz", "/action-openapi.json", "/mcp", "/api/workspaces"} <= _paths(gateway)
    transport = httpx2.ASGITransport(app=gateway)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        health = (await client.get("/healthz")).json()
        schema = (await client.get("/action-openapi.json")).json()
        unauthenticated = await client.get("/api/workspaces")
    assert health["driver"] == "modal"
    assert "/api/workspaces" in schema["paths"]
    # Modal serves web endpoints over HTTPS only, whatever scheme its scope carries.
    assert schema["servers"] == [{"url": "https://127.0.0.1"}]
    assert unauthenticated.status_code == 401


def test_the_web_function_refuses_to_start_without_a_token(
    wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MODAL_WORKSPACE_MCP_TOKEN", raising=False)
    monkeypatch.delenv("MODAL_WORKSPACE_MCP_TOKEN_FILE", raising=False)
    module = _load(monkeypatch)

    with pytest.raises(RuntimeError, match="MODAL_WORKSPACE_MCP_TOKEN"):
        module.build_gateway()
