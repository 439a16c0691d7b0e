"""The gateway on Modal: `modal deploy modal_app.py` deploys one web function that serves the
FastAPI app (REST, `/action-openapi.json`, `/mcp/`) on the Modal driver.

The gateway image installs this project's wheel, which is also what every workspace image
carries (it holds the workspace agent): the newest one in the checkout's `target/wheels`, or the
one `MODAL_WORKSPACE_WHEEL` names; a deploy from a checkout without one builds it first
(maturin). The bearer token comes from a Modal Secret (by default `modal-workspace-mcp`, holding
`MODAL_WORKSPACE_MCP_TOKEN`); everything else is configured with environment variables, read
once when a container starts (`modal_workspace_core.config`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import modal

APP_NAME = os.environ.get("MODAL_WORKSPACE_APP_NAME", "modal-workspace-mcp")
SECRET_NAME = os.environ.get("MODAL_WORKSPACE_SECRET", "modal-workspace-mcp")
PYTHON_VERSION = "3.11"
WHEEL_DIR = "/opt/modal-workspace/wheels"
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
    "MODAL_WORKSPACE_AGENT_TIMEOUT",
    "MODAL_WORKSPACE_PUBLIC_URL",
)


def gateway_image(wheel: Path | None = None) -> modal.Image:
    """Debian slim with this project's wheel installed; the wheel stays in the image so the
    Modal driver can put it into the workspace image too."""
    image = modal.Image.debian_slim(python_version=PYTHON_VERSION)
    env = {"MODAL_WORKSPACE_DRIVER": "modal"}
    env.update({k: os.environ[k] for k in FORWARDED_SETTINGS if os.environ.get(k)})
    if not modal.is_local():
        # Inside a running container the image is already built; only its definition is needed.
        return image.env(env)
    if wheel is None:
        from modal_workspace_core.drivers.modal.images import (
            WHEEL_ENV,
            WheelNotFoundError,
            build_wheel,
            find_wheel,
        )

        try:
            wheel = find_wheel()
        except WheelNotFoundError:
            if os.environ.get(WHEEL_ENV):
                raise
            # A deploy from a fresh checkout builds the wheel itself.
            wheel = build_wheel()
    remote = f"{WHEEL_DIR}/{wheel.name}"
    return (
        image.add_local_file(wheel, remote, copy=True)
        .run_commands(f"pip install --no-cache-dir {remote}")
        .env({**env, "MODAL_WORKSPACE_WHEEL": remote})
    )


app = modal.App(APP_NAME, image=gateway_image())


def build_gateway() -> Any:
    """The gateway's ASGI app on the Modal driver, configured from the environment."""
    from modal_workspace_core.config import load_settings
    from modal_workspace_core.service import Service
    from modal_workspace_core.surfaces.rest.app import create_app

    settings = load_settings(driver="modal")
    if not settings.tokens:
        raise RuntimeError(
            f"no bearer token: add MODAL_WORKSPACE_MCP_TOKEN to the Modal Secret {SECRET_NAME!r}"
        )
    return create_app(
        Service.open(settings),
        settings.tokens,
        host="0.0.0.0",
        allowed_hosts=settings.allowed_hosts,
        # Modal's proxy serves web endpoints over HTTPS only and routes by the Host header,
        # which therefore names the deployment; clients cannot reach the container around it.
        public_scheme="https",
    )


def gateway_secrets() -> list[modal.Secret]:
    """The bearer token's secret, and the GitHub secret when it is allowlisted: the gateway
    holds the GitHub token and hands it to the one git step that needs it, so it is never
    attached to a sandbox."""
    secrets = [modal.Secret.from_name(SECRET_NAME)]
    github = os.environ.get("MODAL_WORKSPACE_GITHUB_SECRET") or "github"
    allowed = os.environ.get("MODAL_WORKSPACE_ALLOWED_SECRETS", "")
    if github in {entry.split(":")[0].strip() for entry in allowed.split(",")}:
        secrets.append(modal.Secret.from_name(github, required_keys=["GH_TOKEN"]))
    return secrets


@app.function(secrets=gateway_secrets(), timeout=600, scaledown_window=300)
@modal.concurrent(max_inputs=MAX_CONCURRENT_REQUESTS)
@modal.asgi_app()
def gateway() -> Any:
    return build_gateway()
