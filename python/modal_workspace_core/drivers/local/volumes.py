"""Volumes on the local driver: an allowlisted volume name is the directory
`<data root>/volumes/<name>/`, bound read-write at the requested path inside the sandbox.

The directory outlives every workspace that mounts it (nothing here deletes it) and is shared by
all of them. Without a uid of their own per workspace (the gateway not root) every workspace's
commands run as the gateway's uid, which owns the directory (0700). With one (root), the
directory stays root's and 0700, and each workspace that mounts it gets a POSIX ACL entry for its
commands' uid, on the directory and as its default: so files any of them makes (with the usual
modes, 0666/0777 less the umask) stay writable by all the others. A workspace that mounts the
volume for the first time is added to every file already in it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ...errors import InvalidArgumentError, UpstreamError, core_refusal
from ...policy import WORKSPACE_ROOT, allowed
from ..mounts import volume_mount

VOLUMES_DIR = "volumes"

# The kernel's xattr form of a POSIX ACL (linux/posix_acl_xattr.h): a version, then
# (tag, perm, id) entries sorted by tag and id.
_ACL_ACCESS = "system.posix_acl_access"
_ACL_DEFAULT = "system.posix_acl_default"
_ACL_VERSION = 2
_USER_OBJ, _USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_UNDEFINED_ID = 0xFFFFFFFF
_ENTRY = struct.Struct("<HHI")


def check_request(
    volumes: Any, *, isolated: bool, why_not: str, sandbox_paths: Iterable[Path]
) -> dict[str, str]:
    """The volumes of a create request, checked before anything exists: a mapping of mount
    paths (the drivers' common rule) to volume names that can be directory names. The
    allowlist is the gateway's (`Service.volumes`); `sandbox_paths` are the host paths the
    sandbox mounts at their own place (the agent's Python), which a volume must not hide."""
    if not volumes:
        return {}
    if not isinstance(volumes, Mapping):
        raise InvalidArgumentError(
            "invalid_argument", "volumes must map mount paths to names", "volumes"
        )
    if not isolated:
        # Unisolated, commands see the host's own filesystem: there is no mount to make.
        raise InvalidArgumentError(
            "invalid_argument",
            "volumes need bubblewrap isolation to be mounted, which this server does not have "
            f"({why_not})",
            "volumes",
        )
    checked: dict[str, str] = {}
    own = [str(p) for p in sandbox_paths]
    for mount, name in volumes.items():
        field = f"volumes[{str(mount)[:32]}]"
        path = volume_mount(mount, field)
        # Not over the agent's own Python; and not in or over another volume: bubblewrap would
        # make the inner one's mount point in the outer volume, following whatever symlink a
        # workspace sharing that volume put there.
        clashes = [(host, f"the agent runs from {host}") for host in own]
        clashes += [(other, f"in or over the one at {other}") for other in checked]
        for other, why in clashes:
            if path == other or path.startswith(other + "/") or other.startswith(path + "/"):
                raise InvalidArgumentError(
                    "invalid_argument", f"{field}: cannot mount a volume at {path}: {why}", field
                )
        checked[path] = volume_name(name, field)
    return checked


def volume_name(name: Any, field: str) -> str:
    """A Modal object name that is also one plain directory name (not `.` or `..`)."""
    # The shape check of the allowlist rule, with the name as its own allowlist.
    with core_refusal(field):
        checked = allowed(str(name), [str(name)], "volumes")
    if checked in (".", ".."):
        raise InvalidArgumentError(
            "invalid_argument", f"{field}: {checked!r} cannot name a volume", field
        )
    return checked


def host_dir(data_root: Path, name: str, commands_uid: int | None) -> Path:
    """The volume's directory, created on first use (0700); with `commands_uid` (a workspace's
    own uid) that uid is given its share of the directory and of what is in it."""
    parent = data_root / VOLUMES_DIR
    parent.mkdir(mode=0o700, exist_ok=True)
    path = parent / volume_name(name, "volumes")
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    if commands_uid is not None:
        _share(path, commands_uid)
    return path


def mount_point(inside: str, writable: Mapping[str, Path]) -> None:
    """Makes the mount point of a volume inside a directory the workspace's commands write in
    (its files, its home, a /tmp on its disk), before the sandbox starts: bubblewrap would make
    it itself and follow a symlink a command left on the way. A symlink or a file there refuses
    the start instead. Elsewhere the mount point is on the sandbox's own root, made by
    bubblewrap."""
    for root_inside, root_host in writable.items():
        if inside.startswith(root_inside + "/"):
            parts = inside[len(root_inside) + 1 :].split("/")
            _make_dirs_nofollow(root_host, parts, inside)
            return


def writable_roots(
    workspace: Path, home: Path, tmp: Path | None, home_inside: str
) -> dict[str, Path]:
    """The sandbox's directories that the workspace's commands write in, by their path inside."""
    roots = {WORKSPACE_ROOT: workspace, home_inside: home}
    if tmp is not None:
        roots["/tmp"] = tmp
    return roots


def _make_dirs_nofollow(root: Path, parts: list[str], inside: str) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            try:
                child = os.open(
                    part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                )
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UpstreamError(
                        "upstream",
                        f"cannot mount the volume at {inside}: the workspace has a symlink or a "
                        f"file at {part!r} on the way; remove it and try again",
                    ) from None
                raise
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


# --- sharing through ACLs ------------------------------------------------------------------------


def _share(path: Path, uid: int) -> None:
    top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if uid in _named_users(top):
            return  # shared with this uid before (the top directory is done last)
        # By descriptor, never by path: a workspace mounting the volume may be changing it now,
        # and a directory it swaps for a symlink must not lead the gateway out of the volume.
        for _, _, files, dir_fd in os.fwalk(path, follow_symlinks=False):
            if dir_fd != top:
                _grant(dir_fd, uid, directory=True)
            for name in files:
                _grant_file(dir_fd, name, uid)
        _grant(top, uid, directory=True)
    finally:
        os.close(top)


def _grant_file(dir_fd: int, name: str, uid: int) -> None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except OSError:
        return  # a symlink (its target's ACL is not the volume's), a socket, or gone meanwhile
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode) or stat.S_ISDIR(os.fstat(fd).st_mode):
            _grant(fd, uid, directory=False)
    finally:
        os.close(fd)


def _grant(fd: int, uid: int, *, directory: bool) -> None:
    """Gives `uid` the owner's rights on the open file `fd` (and, on a directory, to what is
    made in it from now on)."""
    mode = os.fstat(fd).st_mode
    owner = (mode >> 6) & 7
    entries = _entries(fd, _ACL_ACCESS) or _from_mode(mode)
    os.setxattr(fd, _ACL_ACCESS, _encode(_with_user(entries, uid, owner)))
    if directory:
        defaults = _entries(fd, _ACL_DEFAULT) or [
            (_USER_OBJ, 7, _UNDEFINED_ID),
            (_GROUP_OBJ, 0, _UNDEFINED_ID),
            (_OTHER, 0, _UNDEFINED_ID),
        ]
        os.setxattr(fd, _ACL_DEFAULT, _encode(_with_user(defaults, uid, 7)))


def _named_users(fd: int) -> set[int]:
    return {i for tag, _, i in _entries(fd, _ACL_ACCESS) if tag == _USER}


def _entries(fd: int, name: str) -> list[tuple[int, int, int]]:
    try:
        data = os.getxattr(fd, name)
    except OSError as err:
        if err.errno in (errno.ENODATA, errno.EOPNOTSUPP):
            return []
        raise
    return [_ENTRY.unpack_from(data, off) for off in range(4, len(data), _ENTRY.size)]


def _from_mode(mode: int) -> list[tuple[int, int, int]]:
    return [
        (_USER_OBJ, (mode >> 6) & 7, _UNDEFINED_ID),
        (_GROUP_OBJ, (mode >> 3) & 7, _UNDEFINED_ID),
        (_OTHER, mode & 7, _UNDEFINED_ID),
    ]


def _with_user(
    entries: list[tuple[int, int, int]], uid: int, perm: int
) -> list[tuple[int, int, int]]:
    kept = [e for e in entries if e[0] != _MASK and not (e[0] == _USER and e[2] == uid)]
    kept.append((_USER, perm, uid))
    # The mask bounds every named entry and the owning group: it must let all of them through.
    mask = 0
    for tag, p, _ in kept:
        if tag in (_USER, _GROUP, _GROUP_OBJ):
            mask |= p
    kept.append((_MASK, mask, _UNDEFINED_ID))
    return sorted(kept, key=lambda e: (e[0], e[2]))


def _encode(entries: list[tuple[int, int, int]]) -> bytes:
    return struct.pack("<I", _ACL_VERSION) + b"".join(_ENTRY.pack(*e) for e in entries)
