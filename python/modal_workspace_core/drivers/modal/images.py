"""The default workspace image: Debian slim with the tools agents expect (git, git-lfs, ripgrep,
jq, curl, …), uv and Python, plus this project's wheel, which carries the workspace agent.

Modal builds it once and reuses the cached layers.
`python -m modal_workspace_core.drivers.modal.images publish [NAME]` builds it and publishes it
as a named image, which the Modal driver then uses when `MODAL_WORKSPACE_DEFAULT_IMAGE_NAME`
names it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import modal

from ... import __version__

__all__ = [
    "APT_PACKAGES",
    "DEFAULT_IMAGE_NAME",
    "PYTHON_VERSION",
    "WHEEL_ENV",
    "build_wheel",
    "find_wheel",
    "publish_workspace_image",
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
# Where the project's wheel is, when not in this checkout's `target/wheels` (`maturin build`).
WHEEL_ENV = "MODAL_WORKSPACE_WHEEL"
DEFAULT_IMAGE_NAME = "modal-workspace"
# Where the wheel lands inside images, so an image's wheel can be found and installed again.
WHEEL_DIR = "/opt/modal-workspace/wheels"


class WheelNotFoundError(FileNotFoundError):
    """No wheel of this project to put in the image; the message says how to build one."""


def find_wheel(environ: Mapping[str, str] | None = None) -> Path:
    """This project's wheel: `$MODAL_WORKSPACE_WHEEL`, else the newest wheel of this version in
    the checkout's `target/wheels` (what `maturin build --release` writes)."""
    env = os.environ if environ is None else environ
    explicit = env.get(WHEEL_ENV)
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise WheelNotFoundError(f"{WHEEL_ENV} names {path}, which is not a file")
        return path
    checkout = Path(__file__).resolve().parents[2]
    pattern = f"modal_workspace_core-{__version__}-*.whl"
    wheels = sorted((checkout / "target" / "wheels").glob(pattern), key=lambda p: p.stat().st_mtime)
    if not wheels:
        raise WheelNotFoundError(
            "no wheel of modal-workspace-core to put in the workspace image: run "
            f"`maturin build --release` in the checkout, or set {WHEEL_ENV} to a wheel's path"
        )
    return wheels[-1]


def build_wheel() -> Path:
    """Build this checkout's wheel with maturin (release mode) into `target/wheels`, for a deploy
    from a checkout that has none yet; returns it."""
    checkout = Path(__file__).resolve().parents[2]
    if not (checkout / "pyproject.toml").is_file():
        raise WheelNotFoundError(
            f"not in a checkout of modal-workspace-core: set {WHEEL_ENV} to a wheel's path"
        )
    out = checkout / "target" / "wheels"
    command = [sys.executable, "-m", "maturin", "build", "--release", "--out", str(out)]
    done = subprocess.run(command, cwd=checkout, check=False)
    if done.returncode != 0:
        raise WheelNotFoundError(f"`maturin build --release` failed (exit {done.returncode})")
    return find_wheel({})


def workspace_image(wheel: Path | None = None) -> modal.Image:
    """The image every workspace starts from unless a named image or an image id is chosen."""
    wheel = wheel or find_wheel()
    remote = f"{WHEEL_DIR}/{wheel.name}"
    return (
        modal.Image.debian_slim(python_version=PYTHON_VERSION)
        .apt_install(*APT_PACKAGES)
        .pip_install("uv")
        .add_local_file(wheel, remote, copy=True)
        .run_commands(f"uv pip install --system {remote}", "git lfs install --system")
        .workdir("/workspace")
    )


def publish_workspace_image(
    name: str = DEFAULT_IMAGE_NAME, *, app_name: str = "modal-workspace-images"
) -> str:
    """Build the default workspace image and publish it as `name`; returns its image id."""
    app = modal.App.lookup(app_name, create_if_missing=True)
    image = workspace_image().build(app)
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
        image_id = publish_workspace_image(args.name)
    except WheelNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"published {args.name} ({image_id}); set MODAL_WORKSPACE_DEFAULT_IMAGE_NAME={args.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
