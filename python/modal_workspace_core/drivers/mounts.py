"""Where a volume may be mounted in a workspace: the core's one rule for every driver
(`policy.volume_mount`), as the gateway's error naming the request's field.

The gateway checks each mount path before any driver is called, and each driver checks again at
its own boundary (a driver can be used without the gateway), so the Modal and local drivers
accept exactly the same requests.
"""

from __future__ import annotations

from ..errors import InvalidArgumentError, core_refusal
from ..policy import volume_mount as _core_volume_mount


def volume_mount(mount: object, field: str) -> str:
    """The canonical form of the absolute path `mount` where a volume may be mounted, or an
    InvalidArgumentError naming `field`."""
    if not isinstance(mount, str):
        raise InvalidArgumentError(
            "invalid_argument", f"{field}: a mount path must be absolute", field
        )
    with core_refusal(field):
        return _core_volume_mount(mount)
