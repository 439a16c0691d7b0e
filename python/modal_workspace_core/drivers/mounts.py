"""Where a volume may be mounted in a workspace: one rule for every driver.

The gateway checks each mount path with it before any driver is called, and each driver checks
again at its own boundary (a driver can be used without the gateway), so the Modal and local
drivers accept exactly the same requests.
"""

from __future__ import annotations

from ..errors import InvalidArgumentError
from ..policy import WORKSPACE_ROOT, PolicyError, workspace_path

# What a sandbox is built from, on either driver: a volume at, under or above one of these would
# replace the system, the sandbox's own /proc and /dev, its /etc, or the agent's state and
# socket (both drivers keep them under /run).
_SYSTEM_TREES = (
    "/bin",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
)
# Directories a workspace's commands write in: a volume may go inside one, never over one (nor
# over a parent of one, which would hide it).
_WRITABLE_DIRS = (WORKSPACE_ROOT, "/home/workspace", "/tmp")


def volume_mount(mount: object, field: str) -> str:
    """The canonical form of the absolute path `mount` where a volume may be mounted, or an
    InvalidArgumentError naming `field`."""
    if not isinstance(mount, str) or not mount.startswith("/"):
        raise InvalidArgumentError(
            "invalid_argument", f"{field}: a mount path must be absolute", field
        )
    # A `..` is refused even where it would stay inside: the path means something else once a
    # symlink is involved, and the request should say where it mounts plainly.
    if ".." in mount.split("/"):
        raise InvalidArgumentError(
            "invalid_argument", f"{field}: a mount path must not contain '..'", field
        )
    try:
        path = workspace_path("/", mount)
    except PolicyError as exc:
        raise InvalidArgumentError("invalid_argument", f"{field}: {exc}", field) from None
    for tree in _SYSTEM_TREES:
        if _within(path, tree) or _within(tree, path):
            raise InvalidArgumentError(
                "invalid_argument",
                f"{field}: cannot mount a volume at {path}: the sandbox needs {tree}",
                field,
            )
    for needed in _WRITABLE_DIRS:
        if _within(needed, path):
            raise InvalidArgumentError(
                "invalid_argument",
                f"{field}: cannot mount a volume over {path}: it would hide {needed}",
                field,
            )
    return path


def _within(path: str, root: str) -> bool:
    """`path` is `root` or lies under it (both canonical)."""
    return path == root or root == "/" or path.startswith(root + "/")
