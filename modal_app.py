"""The gateway on Modal: `modal deploy modal_app.py` deploys one web function that serves the
FastAPI app (REST, `/action-openapi.json`, `/mcp/`) on the Modal driver.

The deploying machine needs only `modal`: the gateway image builds this project's wheel inside
Modal's image build, from the checkout this file is in (a builder stage with the Rust toolchain,
cached on the source: `python/modal_workspace_core/drivers/modal/wheel_stage.py`), so it is a
Linux wheel whatever machine deploys. `MODAL_WORKSPACE_WHEEL` names a Linux x86-64 wheel to upload
instead (faster where one is at hand). The wheel stays in the image: the gateway puts it into
every workspace image too (it holds the workspace agent). The bearer token comes from a Modal
Secret (by default `modal-workspace-mcp`, holding `MODAL_WORKSPACE_MCP_TOKEN`); everything else
is configured with environment variables, read once when a container starts
(`modal_workspace_core.config`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import modal

APP_NAME = os.environ.get("MODAL_WORKSPACE_APP_NAME", "modal-workspace-mcp")
SECRET_NAME = os.environ.get("MODAL_WORKSPACE_SECRET", "modal-workspace-mcp")
PYTHON_VERSION = "3.11"
# The checkout this file is in, wherever `modal deploy` is run from.
CHECKOUT = Path(__file__).resolve().parent
WHEEL_STAGE = CHECKOUT / "python" / "modal_workspace_core" / "drivers" / "modal" / "wheel_stage.py"
PIP_INSTALL = "python -m pip install --no-cache-dir"
# Long-polls are clamped to 25 s by the service, under GPT Actions' 45 s and Modal's ~150 s
# request limit; one container holds many of them at once.
MAX_CONCURRENT_REQUESTS = 200
# Settings passed through to the gateway's containers when set where `modal deploy` runs.
FORWARDED_SETTINGS = (
    "MODAL_WORKSPACE_ALLOWED_SECRETS",
    "MODAL_WORKSPACE_ALLOWED_VOLUMES",
    "MODAL_WORKSPACE_ALLOWED_HOSTS",
    "MODAL_WORKSPACE_GITHUB_SECRET",
    "MODAL_WORKSPACE_DEFAULT_IMAGE_NAME",
    "MODAL_WORKSPACE_SANDBOX_APP",
    "MODAL_WORKSPACE_CHANNEL_IDLE_SECONDS",
    "MODAL_WORKSPACE_STATE_VOLUME",
    "MODAL_WORKSPACE_AGENT_TIMEOUT",
    "MODAL_WORKSPACE_PUBLIC_URL",
    "MODAL_WORKSPACE_TEMPLATE_CHECK_SECONDS",
)


def wheel_stage() -> ModuleType:
    """The wheel's builder stage, loaded by its path: the package itself is not installed (and
    could not be imported without its compiled core) where only `modal` is."""
    name = "_modal_workspace_wheel_stage"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, WHEEL_STAGE)
    if spec is None or spec.loader is None or not WHEEL_STAGE.is_file():
        raise FileNotFoundError(f"{WHEEL_STAGE} is missing: deploy from a checkout")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def gateway_image(wheel: Path | None = None) -> modal.Image:
    """Debian slim with this project's wheel installed, built from the checkout's source (or the
    wheel given, or the one `MODAL_WORKSPACE_WHEEL` names)."""
    image = modal.Image.debian_slim(python_version=PYTHON_VERSION)
    env = {"MODAL_WORKSPACE_DRIVER": "modal"}
    env.update({k: os.environ[k] for k in FORWARDED_SETTINGS if os.environ.get(k)})
    if not modal.is_local():
        # Inside a running container the image is already built; only its definition is needed.
        return image.env(env)
    stage = wheel_stage()
    given = wheel or os.environ.get("MODAL_WORKSPACE_WHEEL")
    if given:
        path = Path(given)
        if not path.is_file():
            raise FileNotFoundError(f"MODAL_WORKSPACE_WHEEL names {path}, which is not a file")
        source = stage.LocalWheel(path)
        found = f"{stage.WHEEL_DIR}/{path.name}"
    else:
        source = stage.Checkout(CHECKOUT)
        # The gateway finds the wheel the stage built in that directory.
        found = stage.WHEEL_DIR
    image = source.install(image, PIP_INSTALL)
    return image.env({**env, "MODAL_WORKSPACE_WHEEL": found})


app = modal.App(APP_NAME, image=gateway_image())


def build_gateway() -> Any:
    """The gateway's ASGI app on the Modal driver, configured from the environment."""
    from modal_workspace_core.config import load_settings
    from modal_workspace_core.operations import open_service
    from modal_workspace_core.surfaces.rest.app import create_app
    from modal_workspace_core.surfaces.serving_gc import settle_for_serving

    settings = load_settings(driver="modal")
    if not settings.tokens:
        raise RuntimeError(
            f"no bearer token: add MODAL_WORKSPACE_MCP_TOKEN to the Modal Secret {SECRET_NAME!r}"
        )
    gateway_app = create_app(
        open_service(settings),
        settings.tokens,
        host="0.0.0.0",
        allowed_hosts=settings.allowed_hosts,
        # Modal's proxy serves web endpoints over HTTPS only and routes by the Host header,
        # which therefore names the deployment; clients cannot reach the container around it.
        public_scheme="https",
    )
    # This container serves the gateway alone: its collector is set for many parked requests.
    settle_for_serving()
    return gateway_app


def gateway_secrets() -> list[modal.Secret]:
    """The bearer token's secret, the GitHub secret when it is allowlisted, and the GitHub App's
    secret when one is named: the gateway holds the GitHub token (or mints one per operation
    with the App's key) and hands it to the one git step that needs it, so neither is ever
    attached to a sandbox."""
    secrets = [modal.Secret.from_name(SECRET_NAME)]
    github = os.environ.get("MODAL_WORKSPACE_GITHUB_SECRET") or "github"
    allowed = os.environ.get("MODAL_WORKSPACE_ALLOWED_SECRETS", "")
    if github in {entry.split(":")[0].strip() for entry in allowed.split(",")}:
        secrets.append(modal.Secret.from_name(github, required_keys=["GH_TOKEN"]))
    if app_secret := os.environ.get("MODAL_WORKSPACE_GITHUB_APP_SECRET"):
        keys = ["MODAL_WORKSPACE_GITHUB_APP_ID", "MODAL_WORKSPACE_GITHUB_APP_PRIVATE_KEY"]
        secrets.append(modal.Secret.from_name(app_secret, required_keys=keys))
    return secrets


@app.function(secrets=gateway_secrets(), timeout=600, scaledown_window=300)
@modal.concurrent(max_inputs=MAX_CONCURRENT_REQUESTS)
@modal.asgi_app()
def gateway() -> Any:
    return build_gateway()
