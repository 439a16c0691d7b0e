"""The host's view of a workspace's processes, read from /proc: which carry its marker variable,
and whether a pid is still running (a zombie has ended)."""

from __future__ import annotations

from pathlib import Path

from modal_workspace_core.drivers.local.driver import WORKSPACE_ID_ENV


def processes_of(workspace_id: str) -> list[int]:
    """Host pids of every process carrying the workspace's marker variable."""
    needle = f"\0{WORKSPACE_ID_ENV}={workspace_id}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle in b"\0" + (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"  # a zombie has ended
