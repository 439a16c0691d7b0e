"""The default workspace image: Debian slim with the tools agents expect (git, git-lfs, ripgrep,
jq, curl, …), uv and Python, plus this project's wheel, which carries the workspace agent: built
from the checkout's source inside Modal's image build, or a wheel given (`wheel_stage`).

Modal builds it once and reuses the cached layers.
`python -m modal_workspace_core.drivers.modal.images publish [NAME]` builds it and publishes it
as a named image, which the Modal driver then uses when `MODAL_WORKSPACE_DEFAULT_IMAGE_NAME`
names it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import modal

from ..._core import __version__
from ...config import DEFAULT_IMAGE_NAME_ENV, WHEEL_ENV, ConfigError, load_settings
from .wheel_stage import WHEEL_DIR, Checkout, LocalWheel, WheelSource, find_checkout

__all__ = [
    "APT_PACKAGES",
    "DEFAULT_IMAGE_NAME",
    "PYTHON_VERSION",
    "UV_INSTALL",
    "WHEEL_DIR",
    "WheelNotFoundError",
    "base_image",
    "find_wheel",
    "publish_workspace_image",
    "wheel_source",
    "workspace_image",
]

APT_PACKAGES = (
    "ca-certificates",
    "curl",
    "git",
    "git-lfs",
    "jq",
    "openssh-client",
    "ripgrep",
    "unzip",
    "wget",
)
PYTHON_VERSION = "3.11"
DEFAULT_IMAGE_NAME = "modal-workspace"
UV_INSTALL = "uv pip install --system"


class WheelNotFoundError(FileNotFoundError):
    """No wheel of this project to put in the image; the message says how to get one."""


def find_wheel(configured: Path | None) -> Path | None:
    """The wheel the settings name (`ModalSettings.wheel`, from `$MODAL_WORKSPACE_WHEEL`): a wheel,
    or a directory holding this version's wheel (the gateway's image keeps the one it installed
    in `WHEEL_DIR`); None when none is configured."""
    if configured is None:
        return None
    if configured.is_dir():
        wheels = sorted(configured.glob(f"modal_workspace_core-{__version__}-*.whl"))
        if not wheels:
            raise WheelNotFoundError(
                f"{WHEEL_ENV} names {configured}, which holds no wheel of version {__version__}"
            )
        return wheels[-1]
    if not configured.is_file():
        raise WheelNotFoundError(f"{WHEEL_ENV} names {configured}, which is not a file")
    return configured


def wheel_source(wheel: Path | None = None, *, checkout: Path | None = None) -> WheelSource:
    """Where the image's wheel comes from: the wheel configured (`find_wheel`, uploaded as it
    is), else the checkout given or the one this package runs from (built inside Modal's image
    build, so it is a Linux wheel whatever machine deploys)."""
    path = find_wheel(wheel)
    if path is not None:
        return LocalWheel(path)
    root = checkout or find_checkout()
    if root is None:
        raise WheelNotFoundError(
            "no source of modal-workspace-core to build the workspace image from: run from a "
            f"checkout of the repository, or set {WHEEL_ENV} to a Linux x86-64 wheel's path"
        )
    return Checkout(root)


def base_image() -> modal.Image:
    """The workspace image's layers below the project's wheel."""
    return (
        modal.Image.debian_slim(python_version=PYTHON_VERSION)
        .apt_install(*APT_PACKAGES)
        .pip_install("uv")
    )


def workspace_image(
    wheel: Path | None = None, *, checkout: Path | None = None, source: WheelSource | None = None
) -> modal.Image:
    """The image every workspace starts from unless a named image or an image id is chosen."""
    source = source or wheel_source(wheel, checkout=checkout)
    return (
        source.install(base_image(), UV_INSTALL)
        .run_commands("git lfs install --system")
        .workdir("/workspace")
    )


def publish_workspace_image(
    name: str = DEFAULT_IMAGE_NAME,
    *,
    app_name: str = "modal-workspace-images",
    wheel: Path | None = None,
) -> str:
    """Build the default workspace image (with the `wheel` configured, else from the checkout)
    and publish it as `name`; returns its image id."""
    app = modal.App.lookup(app_name, create_if_missing=True)
    image = workspace_image(wheel).build(app)
    image.publish(name)
    return str(image.object_id)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m modal_workspace_core.drivers.modal.images",
        description="Build the default workspace image and publish it as a named Modal image.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    publish = sub.add_parser("publish", help="build and publish the workspace image")
    publish.add_argument("name", nargs="?", default=DEFAULT_IMAGE_NAME)
    args = parser.parse_args(argv)
    try:
        settings = load_settings(driver="modal").modal
        wheel = settings.wheel if settings is not None else None
        image_id = publish_workspace_image(args.name, wheel=wheel)
    except (ConfigError, WheelNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"published {args.name} ({image_id}); set {DEFAULT_IMAGE_NAME_ENV}={args.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
