"""Host uids of their own for each workspace, when the gateway runs as root: a slot per
workspace in a dedicated range, recorded in the workspace's metadata (the gateway's, never
writable from inside) and chosen under a lock of the data root.

A workspace's commands own its files as their uid and nothing else on the host; the agent's git
steps have a second uid, so the token they hold is out of the commands' reach.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .bubblewrap_launch import HostIds

# Far above the uids distributions hand out (and above the usual subordinate ranges), so no
# account of the host shares one; two per workspace.
UID_BASE = 2_000_000_000
MAX_SLOTS = 1_000_000
IDS_PER_SLOT = 2


def enabled() -> bool:
    """Only root can map more than its own uid into a sandbox."""
    return os.geteuid() == 0


def host_ids(slot: int) -> HostIds:
    base = UID_BASE + slot * IDS_PER_SLOT
    return HostIds(commands=base, agent_git=base + 1)


def free_slot(used: Iterable[int]) -> int:
    taken = set(used)
    for slot in range(MAX_SLOTS):
        if slot not in taken:
            return slot
    raise RuntimeError(f"all {MAX_SLOTS} workspace uid slots are in use")


@contextmanager
def allocation_lock(data_root: Path) -> Iterator[None]:
    """Held while a slot is chosen and recorded, across gateway processes."""
    fd = os.open(data_root / ".uid-slots.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
