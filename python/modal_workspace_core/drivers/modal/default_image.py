"""The default workspace image, resolved once per gateway process and reused hydrated.

An `Image` defined layer by layer costs a round trip per layer (and per uploaded file) every time
a sandbox is created from it, even when Modal has every layer cached: the SDK reloads a hydrated
image before each use. So the first create resolves the definition, and later creates reuse the
image id it was given, as a handle the SDK does not reload. A cache, never the record: its key is
what the image is made of (the wheel's or the source's digest and the image's definition), so a
new wheel or an edited source makes a new image, and an entry is dropped after `MAX_AGE_SECONDS`
(an image removed at Modal is resolved again within that time) or when a create that used it fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import modal

from .images import APT_PACKAGES, PYTHON_VERSION, wheel_source, workspace_image
from .wheel_stage import RUST_TOOLCHAIN, WheelSource

__all__ = ["MAX_AGE_SECONDS", "DefaultImage"]

MAX_AGE_SECONDS = 600.0
# What the image is made of besides its wheel: a change to any of these is another image.
_DEFINITION = f"python={PYTHON_VERSION};apt={','.join(APT_PACKAGES)};rust={RUST_TOOLCHAIN}"


@dataclass
class _Entry:
    key: str
    image: modal.Image
    made_at: float


class DefaultImage:
    """One per driver. `get()` is cheap: it hashes the wheel (or the source) and returns either
    the definition to resolve or the resolved image."""

    def __init__(
        self,
        find: Callable[[], WheelSource] = wheel_source,
        make: Callable[[WheelSource], modal.Image] = lambda source: workspace_image(source=source),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._find = find
        self._make = make
        self._clock = clock
        self._entry: _Entry | None = None
        self._stamp: tuple[tuple[object, ...], str] | None = None

    def get(self) -> modal.Image:
        source = self._find()
        key = f"{_DEFINITION};{self._digest(source)}"
        entry = self._entry
        now = self._clock()
        if entry is not None and entry.key == key and now - entry.made_at < MAX_AGE_SECONDS:
            if entry.image._is_hydrated:
                return _resolved(entry.image)
            # Not resolved yet (its first create failed or runs now): resolving it again is safe.
            return entry.image
        image = self._make(source)
        self._entry = _Entry(key, image, now)
        return image

    def _digest(self, source: WheelSource) -> str:
        # Hashing a wheel of megabytes on every create would hold the event loop: the digest is
        # computed again only when the files' sizes or modification times change.
        stamp = source.stamp()
        if self._stamp is None or self._stamp[0] != stamp:
            self._stamp = (stamp, source.digest())
        return self._stamp[1]

    def forget(self) -> None:
        """Resolve the definition again at the next create (one failed with this image)."""
        self._entry = None


def _resolved(image: modal.Image) -> modal.Image:
    # The SDK has no public handle for "this image, already resolved": `Image.from_id` is one more
    # round trip per create, and a hydrated image is reloaded layer by layer. `_new_hydrated` with
    # `skip_reload` is the SDK's own constructor for objects it already knows (`_object.py`).
    return modal.Image._new_hydrated(
        image.object_id, image.client, image._get_metadata(), skip_reload=True
    )
