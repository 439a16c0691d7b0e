"""A disk of its own for each workspace, when the gateway runs as root: an ext4 file system in a
sparse image in the workspace's directory, loop-mounted for its life. The workspace's files, its
home and its /tmp live on it, so a command that fills it gets ENOSPC ("No space left on
device") and every other workspace, and the host, keep their space.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
from pathlib import Path

_TOOLS_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
log = logging.getLogger(__name__)
_TIMEOUT = 120.0


class DiskError(RuntimeError):
    """The image could not be made, mounted or released; the message says which and why."""


def available() -> str | None:
    """Why a disk of its own cannot be given here, or None when it can."""
    if os.geteuid() != 0:
        return "mounting an image needs root"
    for tool in ("mkfs.ext4", "mount", "umount"):
        if shutil.which(tool, path=_TOOLS_PATH) is None:
            return f"{tool} is not installed"
    return None


class WorkspaceDisk:
    """The image and mount point of one workspace's disk."""

    def __init__(self, directory: Path) -> None:
        self.image = directory / "disk.img"
        self.mount_point = directory / "disk"

    @property
    def workspace(self) -> Path:
        return self.mount_point / "workspace"

    @property
    def home(self) -> Path:
        return self.mount_point / "home"

    @property
    def tmp(self) -> Path:
        return self.mount_point / "tmp"

    def create(self, size_mb: int, owner: int) -> None:
        """Makes the image (sparse: it takes host space only as it fills), mounts it and lays
        out its directories, owned by the workspace's uid."""
        with self.image.open("xb") as f:
            f.truncate(size_mb << 20)
        _run(
            [
                "mkfs.ext4",
                "-q",
                "-F",
                "-m",
                "0",
                "-E",
                f"root_owner={owner}:{owner}",
                str(self.image),
            ]
        )
        self.mount_point.mkdir(mode=0o700, exist_ok=True)
        self.mount()
        for part in (self.workspace, self.home, self.tmp):
            part.mkdir(mode=0o700)
            os.chown(part, owner, owner)
        os.chmod(self.tmp, 0o1777)
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.mount_point / "lost+found")

    def mount(self) -> None:
        """Mounts the image if it is not (after a reboot, or a gateway's first start)."""
        if os.path.ismount(self.mount_point):
            return
        _run(["mount", "-o", "loop,nosuid,nodev", str(self.image), str(self.mount_point)])

    def release(self) -> None:
        """Unmounts the image; what remains is an ordinary file to delete."""
        if not os.path.ismount(self.mount_point):
            return
        try:
            _run(["umount", str(self.mount_point)])
        except DiskError:
            # Busy only while the last processes of the workspace are dying: detach it now,
            # the kernel frees it when they are gone.
            _run(["umount", "-l", str(self.mount_point)])


def _run(argv: list[str]) -> None:
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            env={"PATH": _TOOLS_PATH, "LANG": "C.UTF-8"},
            timeout=_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        log.warning("%s failed: %s", argv[0], err)
        raise DiskError(
            f"{argv[0]} failed ({type(err).__name__}); the server's log says why"
        ) from err
    if done.returncode != 0:
        # The tool's own words name host paths (the image, the mount point): for the log only.
        why = (done.stderr or done.stdout).decode(errors="replace").strip()
        log.warning("%s failed (exit %d): %s", argv[0], done.returncode, why)
        raise DiskError(f"{argv[0]} failed (exit {done.returncode}); the server's log says why")
