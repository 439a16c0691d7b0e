"""`modal_app.py`, the gateway's Modal deployment, checked in-process: it imports cleanly, defines
the app, the web function and its image, that image installs this project's wheel (proved by
building it against the local control plane, which records what the build would run), and the
web function serves the same routes as the gateway everywhere else."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx2
import modal
import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_control_plane.state import ImageRecord
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.modal.channel_key import channel_key
from modal_workspace_core.operations import new_service
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


def load_modal_app(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
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
    module = load_modal_app(monkeypatch)

    assert isinstance(module.app, modal.App)
    assert module.app.name == "modal-workspace-mcp"
    assert isinstance(module.gateway, modal.Function)
    assert module.gateway._is_web_endpoint()
    (secret,) = module.gateway._spec_.secrets
    assert repr(secret) == "modal.Secret.from_name('modal-workspace-mcp')"


def test_the_github_app_secret_is_attached_to_the_gateway_when_named(
    wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODAL_WORKSPACE_GITHUB_APP_SECRET", "github-app")
    module = load_modal_app(monkeypatch)
    names = [repr(s) for s in module.gateway._spec_.secrets]
    assert names == [
        "modal.Secret.from_name('modal-workspace-mcp')",
        "modal.Secret.from_name('github-app')",
    ]


def test_the_app_name_and_secret_come_from_the_environment(
    wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODAL_WORKSPACE_APP_NAME", "my-gateway")
    monkeypatch.setenv("MODAL_WORKSPACE_SECRET", "my-gateway-token")

    module = load_modal_app(monkeypatch)

    assert module.app.name == "my-gateway"
    assert module.SECRET_NAME == "my-gateway-token"


def test_a_wheel_named_that_is_missing_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MODAL_WORKSPACE_WHEEL", str(tmp_path / "missing.whl"))

    with pytest.raises(FileNotFoundError, match="MODAL_WORKSPACE_WHEEL"):
        load_modal_app(monkeypatch)


def _built(plane: ControlPlane, image: modal.Image) -> list[ImageRecord]:
    """Every layer the control plane built, `image`'s among them."""
    images = plane.call(lambda: dict(plane.state.images))
    assert image.object_id in images
    return list(images.values())


def test_the_gateway_image_installs_a_wheel_given(
    wheel: Path, monkeypatch: pytest.MonkeyPatch, modal_control_plane: ControlPlane
) -> None:
    module = load_modal_app(monkeypatch)
    app = modal.App.lookup("gateway-image-test", create_if_missing=True)

    image = module.gateway_image(wheel).build(app)

    layers = _built(modal_control_plane, image)
    commands = [c for record in layers for c in record.dockerfile_commands]
    remote = f"/opt/modal-workspace/wheels/{wheel.name}"
    assert any(c.startswith("RUN python -m pip install") and remote in c for c in commands)
    assert any(f"MODAL_WORKSPACE_WHEEL={remote}" in c for c in commands)
    assert any("MODAL_WORKSPACE_DRIVER=modal" in c for c in commands)
    state = modal_control_plane.state
    assert wheel.read_bytes() in modal_control_plane.call(lambda: list(state.files.values()))
    # No Rust toolchain where a wheel is given.
    assert not any("rustup" in c for c in commands)


def test_modal_app_needs_only_modal_on_the_deploying_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MODAL_WORKSPACE_WHEEL", raising=False)
    # As on a machine where only `modal` is installed: this package cannot be imported.
    monkeypatch.setitem(sys.modules, "modal_workspace_core", None)

    module = load_modal_app(monkeypatch)

    assert isinstance(module.app, modal.App)
    assert MODAL_APP.parent == module.CHECKOUT


def test_without_a_wheel_the_gateway_image_builds_one_from_the_checkout(
    monkeypatch: pytest.MonkeyPatch, modal_control_plane: ControlPlane
) -> None:
    monkeypatch.delenv("MODAL_WORKSPACE_WHEEL", raising=False)
    module = load_modal_app(monkeypatch)
    app = modal.App.lookup("gateway-image-test", create_if_missing=True)

    image = module.gateway_image().build(app)

    layers = _built(modal_control_plane, image)
    (builder,) = [r for r in layers if any("rustup" in c for c in r.dockerfile_commands)]
    stage = module.wheel_stage()
    assert builder.dockerfile_commands == ["FROM base", *stage.builder_commands(module.PIP_INSTALL)]
    assert f"--default-toolchain {stage.RUST_TOOLCHAIN}" in " ".join(builder.dockerfile_commands)
    # The gateway is told where the wheel is: where the stage installed it from.
    commands = [c for r in layers for c in r.dockerfile_commands]
    assert any(f"MODAL_WORKSPACE_WHEEL={stage.WHEEL_DIR}" in c for c in commands)
    # The build context is the source that `maturin build` reads, and nothing else.
    mounts = modal_control_plane.call(lambda: dict(modal_control_plane.state.mounts))
    context = {name.lstrip("/") for name in mounts[builder.context_mount_id]}
    assert context == set(stage.Checkout(MODAL_APP.parent).files())
    # Everything git tracks of that source is in it (a file not yet added may be too).
    assert set(_tracked_source(stage)) <= context
    assert not any(
        part.startswith(".") or part in {"target", "__pycache__"}
        for name in context
        for part in Path(name).parts
    )
    assert not any(name.endswith((".so", ".pyc", ".whl")) for name in context)


def test_the_builder_layer_is_cached_on_the_source_alone(
    monkeypatch: pytest.MonkeyPatch, modal_control_plane: ControlPlane, tmp_path: Path
) -> None:
    monkeypatch.delenv("MODAL_WORKSPACE_WHEEL", raising=False)
    stage = load_modal_app(monkeypatch).wheel_stage()
    checkout = _copy_checkout(stage, tmp_path / "checkout")
    app = modal.App.lookup("gateway-image-test", create_if_missing=True)

    def builder_id() -> str:
        image = stage.Checkout(checkout).install(modal.Image.debian_slim(), "pip install")
        return str(image.build(app).object_id)

    first = builder_id()
    # Outside the source the build reads (docs, caches, a secret left in the checkout): the
    # same layer.
    (checkout / "docs").mkdir()
    (checkout / "docs" / "notes.md").write_text("notes")
    (checkout / ".env").write_text("MODAL_TOKEN_SECRET=not-for-the-image")
    (checkout / "python" / ".env").write_text("MODAL_TOKEN_SECRET=not-for-the-image")
    (checkout / "src" / "__pycache__").mkdir()
    (checkout / "src" / "__pycache__" / "x.pyc").write_bytes(b"cache")
    assert builder_id() == first
    # A change to the source: a new layer.
    (checkout / "src" / "lib.rs").write_text((checkout / "src" / "lib.rs").read_text() + "\n")
    assert builder_id() != first
    files = modal_control_plane.call(lambda: list(modal_control_plane.state.files.values()))
    assert b"MODAL_TOKEN_SECRET=not-for-the-image" not in files


def _tracked_source(stage: ModuleType, checkout: Path = MODAL_APP.parent) -> list[str]:
    """What git tracks of the source the stage copies (less what it ignores)."""
    listed = subprocess.run(
        ["git", "ls-files", "--", *stage.SOURCE_FILES, *stage.SOURCE_DIRS],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [name for name in listed if not stage.ignored(Path(name))]


def _copy_checkout(stage: ModuleType, to: Path) -> Path:
    for name in stage.Checkout(MODAL_APP.parent).files():
        (to / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(MODAL_APP.parent / name, to / name)
    return to


def _paths(app: object) -> set[str]:
    return {getattr(route, "path", "") for route in getattr(app, "routes", [])}


async def test_the_web_function_serves_the_gateways_routes_on_the_modal_driver(
    wheel: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MODAL_WORKSPACE_MCP_TOKEN", "a-deployment-token")
    monkeypatch.setenv("MODAL_WORKSPACE_DATA_ROOT", str(tmp_path))
    module = load_modal_app(monkeypatch)
    import modal_workspace_core.runtime.service as service_module

    made: list[Any] = []
    create_driver = service_module.create_driver

    def recording(*args: Any, **kwargs: Any) -> Any:
        made.append(create_driver(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(service_module, "create_driver", recording)
    # As in the web function's container, which has Modal credentials of its own (none is
    # configured here).
    monkeypatch.setattr(modal, "is_local", lambda: False)

    gateway = module.build_gateway()

    # Its workspaces' channel keys come from the deployment's token (a Modal container has no
    # Modal token secret of its own to fall back on).
    secret = load_settings({"MODAL_WORKSPACE_MCP_TOKEN": "a-deployment-token"}).channel_secret
    workspace = "ws-" + "0" * 32
    assert secret is not None
    assert made[0]._channel_key(workspace) == channel_key(secret, workspace)
    local = create_app(new_service(RecordingDriver(), load_settings({})), [TOKEN])
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
    module = load_modal_app(monkeypatch)

    with pytest.raises(RuntimeError, match="MODAL_WORKSPACE_MCP_TOKEN"):
        module.build_gateway()


def test_a_fresh_clone_deploys_with_only_modal_installed(
    monkeypatch: pytest.MonkeyPatch, modal_control_plane: ControlPlane, tmp_path: Path
) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(MODAL_APP.parent), str(clone)], check=True)
    monkeypatch.delenv("MODAL_WORKSPACE_WHEEL", raising=False)
    monkeypatch.setitem(sys.modules, "modal_workspace_core", None)
    # `modal deploy` run from elsewhere: the checkout is found from modal_app.py's own place.
    monkeypatch.chdir(tmp_path)
    spec = importlib.util.spec_from_file_location("modal_app", clone / "modal_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "modal_app", module)
    monkeypatch.delitem(sys.modules, "_modal_workspace_wheel_stage", raising=False)
    spec.loader.exec_module(module)
    app = modal.App.lookup("gateway-image-test", create_if_missing=True)

    image = module.gateway_image().build(app)

    layers = _built(modal_control_plane, image)
    (builder,) = [r for r in layers if any("rustup" in c for c in r.dockerfile_commands)]
    mounts = modal_control_plane.call(lambda: dict(modal_control_plane.state.mounts))
    context = {name.lstrip("/") for name in mounts[builder.context_mount_id]}
    # Exactly the tracked source (a fresh clone has no build output, caches or extensions).
    assert context == set(_tracked_source(module.wheel_stage(), clone))


def _definition(function: modal.Function) -> dict[str, Any]:
    """What `modal deploy` sends of a function's definition, as the SDK's loader holds it (the
    test control plane deploys no functions)."""
    from modal._utils.async_utils import synchronizer

    load = synchronizer._translate_in(function)._load
    return {
        name: cell.cell_contents
        for name, cell in zip(load.__code__.co_freevars, load.__closure__ or (), strict=True)
        if name in ("autoscaler_settings", "schedule", "timeout", "max_concurrent_inputs")
    }


def test_the_gateway_scales_within_bounds_and_a_scheduled_sweep_runs_without_it(
    wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = load_modal_app(monkeypatch)
    gateway = _definition(module.gateway)
    scaling = gateway["autoscaler_settings"]
    assert (scaling.min_containers, scaling.max_containers) == (0, module.MAX_GATEWAYS)
    assert scaling.scaledown_window == module.SCALEDOWN_SECONDS
    assert gateway["max_concurrent_inputs"] == module.MAX_CONCURRENT_REQUESTS
    assert gateway["timeout"] == module.REQUEST_TIMEOUT_SECONDS
    assert gateway["schedule"] is None
    sweep = _definition(module.sweep)
    assert isinstance(sweep["schedule"], modal.Period)
    assert sweep["timeout"] == module.SWEEP_TIMEOUT_SECONDS
    assert not module.sweep._is_web_endpoint()
    # With the gateway's secrets: the token and Modal's own credentials reach the sandboxes.
    (secret,) = module.sweep._spec_.secrets
    assert repr(secret) == "modal.Secret.from_name('modal-workspace-mcp')"


async def test_the_scheduled_function_runs_the_gateways_sweep_on_the_modal_driver(
    wheel: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The scheduled function runs the gateways' own sweep (`Janitor.sweep`), which claims each
    due action in the shared store: beside a gateway's it acts once (tests/test_sweep_claims.py)."""
    import asyncio

    from modal_workspace_core.janitor import Janitor

    monkeypatch.setenv("MODAL_WORKSPACE_MCP_TOKEN", "a-deployment-token")
    monkeypatch.setenv("MODAL_WORKSPACE_DATA_ROOT", str(tmp_path))
    module = load_modal_app(monkeypatch)
    swept: list[Any] = []

    async def recording_sweep(self: Janitor, now: Any = None) -> None:
        swept.append(self.svc.driver.name)

    monkeypatch.setattr(Janitor, "sweep", recording_sweep)
    monkeypatch.setattr(modal, "is_local", lambda: False)
    await module.sweep_once()
    await asyncio.sleep(0)
    assert swept == ["modal"]
