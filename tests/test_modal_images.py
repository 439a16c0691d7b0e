"""The default workspace image on the Modal driver, against the local control plane with the real
SDK: a gateway process resolves it once and reuses it, so a second create costs only the sandbox's
own calls; a new wheel (or an edit of the source it is built from) makes a new image."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import modal
import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_workspace_core.drivers.base import WorkspaceSpec
from modal_workspace_core.drivers.modal.default_image import DefaultImage
from modal_workspace_core.drivers.modal.driver import ModalDriver
from modal_workspace_core.drivers.modal.wheel_stage import SOURCE_FILES, Checkout, WheelSource
from modal_workspace_core.errors import UpstreamError
from modal_workspace_core.policy import new_id
from test_modal_app import wheel
from test_modal_driver import _configured_wheel, _settings, _since

__all__ = ["modal_control_plane", "wheel"]  # the fixtures, imported for pytest to find

# The sandbox's own calls, which every create makes.
SANDBOX_CALLS = {"SandboxCreateV2": 1, "SandboxStdinWriteV2": 1}


# The records' first version, written to the state Volume while the sandbox starts: not an
# image's cost.
_RECORDS = ("VolumeGetOrCreate", "VolumePutFiles2", "BlockPut")


async def _create(driver: ModalDriver, plane: ControlPlane) -> Counter[str]:
    before = plane.calls()
    await driver.create(new_id("ws"), WorkspaceSpec())
    spent = _since(before, plane.calls())
    return Counter({k: v for k, v in spent.items() if k not in _RECORDS})


async def test_the_first_create_resolves_the_default_image_and_the_second_reuses_it(
    wheel: Path, modal_control_plane: ControlPlane
) -> None:
    driver = ModalDriver(_settings(default_image_name=None, wheel=_configured_wheel(wheel)))

    first = await _create(driver, modal_control_plane)
    second = await _create(driver, modal_control_plane)
    third = await _create(driver, modal_control_plane)

    assert first == {
        "AppGetOrCreate": 1,
        "AuthTokenGet": 1,
        "EnvironmentGetOrCreate": 1,
        # debian_slim, apt, uv, the wheel's copy, its install, git-lfs, the workdir.
        "ImageGetOrCreate": 7,
        "MountBatchedCheckExistence": 1,
        "MountPutFile": 1,
        "MountGetOrCreate": 1,
        **SANDBOX_CALLS,
    }
    assert second == SANDBOX_CALLS
    assert third == SANDBOX_CALLS
    (image_id,) = {s.definition.image_id for s in modal_control_plane.sandboxes()}
    assert image_id in modal_control_plane.call(lambda: dict(modal_control_plane.state.images))
    await driver.close()


async def test_a_new_wheel_makes_a_new_image(
    wheel: Path, modal_control_plane: ControlPlane
) -> None:
    driver = ModalDriver(_settings(default_image_name=None, wheel=_configured_wheel(wheel)))
    await _create(driver, modal_control_plane)

    wheel.write_bytes(b"the next build of the project's wheel")
    used = await _create(driver, modal_control_plane)

    # Only the layers from the wheel's copy on change; the file is uploaded again.
    assert used["MountPutFile"] == 1
    assert used["ImageGetOrCreate"] == 7
    first, second = (s.definition.image_id for s in modal_control_plane.sandboxes())
    assert first != second
    assert await _create(driver, modal_control_plane) == SANDBOX_CALLS
    await driver.close()


async def test_a_failed_create_resolves_the_image_again_next_time(
    wheel: Path, modal_control_plane: ControlPlane
) -> None:
    driver = ModalDriver(_settings(default_image_name=None, wheel=_configured_wheel(wheel)))
    await _create(driver, modal_control_plane)

    # An allowlisted secret Modal does not hold: the create fails after the image was chosen.
    with pytest.raises(UpstreamError, match="openai"):
        await driver.create(new_id("ws"), WorkspaceSpec(secret_names=["openai"]))
    used = await _create(driver, modal_control_plane)

    assert used["ImageGetOrCreate"] == 7
    await driver.close()


def test_a_checkouts_default_image_is_defined_again_only_when_its_source_changes(
    tmp_path: Path,
) -> None:
    root = tmp_path / "checkout"
    for name in [*SOURCE_FILES, "src/lib.rs", "python/pkg/__init__.py"]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)
    made: list[WheelSource] = []

    def make(source: WheelSource) -> modal.Image:
        made.append(source)
        return modal.Image.debian_slim()

    cache = DefaultImage(find=lambda: Checkout(root), make=make)
    first = cache.get()
    assert cache.get() is first
    (root / "docs").mkdir()
    (root / "docs" / "notes.md").write_text("not part of the build")
    (root / "python" / "pkg" / "__pycache__").mkdir()
    (root / "python" / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"cache")
    assert cache.get() is first
    (root / "src" / "lib.rs").write_text("an edit")

    assert cache.get() is not first
    assert len(made) == 2
