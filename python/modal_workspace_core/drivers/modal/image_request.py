"""What a workspace asks of its image on the Modal driver: a published image by name or an image
id (else the default image), and extra apt and pip packages layered on top, each checked by the
core's policy (`policy.image_*`) before any call to Modal.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import modal

from ...errors import InvalidArgumentError, core_refusal
from ...policy import image_id, image_name, image_packages
from ...runtime.progress import EVERY_SECONDS, reported_while

__all__ = ["ImageRequest", "build_progress", "image_request", "with_packages"]


@dataclass(frozen=True)
class ImageRequest:
    image_name: str | None = None
    image_id: str | None = None
    apt_packages: tuple[str, ...] = ()
    pip_packages: tuple[str, ...] = ()

    def layers(self) -> str:
        """The packages layered on the image, as a progress message names them."""
        parts = [f"apt: {' '.join(self.apt_packages)}"] if self.apt_packages else []
        if self.pip_packages:
            parts.append(f"pip: {' '.join(self.pip_packages)}")
        return "; ".join(parts)


def _checked(field: str, check: Any, value: Any) -> Any:
    try:
        with core_refusal(field):
            return check(value)
    except TypeError as exc:  # a value of another type than the rule takes
        raise InvalidArgumentError("invalid_argument", f"{field}: {exc}", field) from None


def _packages(resources: Mapping[str, Any], kind: str) -> tuple[str, ...]:
    field = f"{kind}_packages"
    value = resources.get(field)
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise InvalidArgumentError("invalid_argument", f"{field} must be a list of strings", field)
    return tuple(_checked(field, lambda items: image_packages(kind, items), list(value)))


def image_request(resources: Mapping[str, Any], default_name: str | None) -> ImageRequest:
    """The image a workspace's resources ask for; `default_name` (the operator's published
    default image) when they name none."""
    name = resources.get("image_name")
    ident = resources.get("image_id")
    if name is not None and ident is not None:
        raise InvalidArgumentError(
            "invalid_argument", "give image_name or image_id, not both", "image_id"
        )
    for field, value in (("image_name", name), ("image_id", ident)):
        if value is not None and not isinstance(value, str):
            raise InvalidArgumentError("invalid_argument", f"{field} must be a string", field)
    return ImageRequest(
        image_name=_checked("image_name", image_name, name)
        if name is not None
        else (None if ident is not None else default_name),
        image_id=_checked("image_id", image_id, ident) if ident is not None else None,
        apt_packages=_packages(resources, "apt"),
        pip_packages=_packages(resources, "pip"),
    )


def with_packages(image: modal.Image, request: ImageRequest) -> modal.Image:
    """`image` with the requested packages as layers of their own, which Modal caches by their
    definition: the same packages on the same image are built once. The values are policy-checked
    bare names and pins, passed as the SDK's arguments (it quotes them for the shell)."""
    if request.apt_packages:
        image = image.apt_install(*request.apt_packages)
    if request.pip_packages:
        image = image.pip_install(*request.pip_packages)
    return image


@contextlib.asynccontextmanager
async def build_progress(
    request: ImageRequest, every: float = EVERY_SECONDS
) -> AsyncIterator[None]:
    """Around the create of a workspace whose image has packages: the caller's progress
    reporter (an MCP call's, when the surface has one) hears that the layer is being built, then
    every `every` seconds that it still is (Modal builds it inside the create call, the first
    time only), and when the sandbox was made. Nothing without packages or without a reporter."""
    layers = request.layers()
    if not layers:
        yield
        return
    async with reported_while(
        f"building the image's package layer ({layers}); cached after the first",
        "still building the image's package layer ({seconds} s)",
        "the image is ready and the workspace started",
        every,
    ):
        yield
