"""What a sandbox's end means for its workspace: why it ended, and the exit snapshot it left.

Modal says why a sandbox ended in its result (`GenericResult.status`, with the entrypoint's exit
code); every workspace is created with exit snapshots enabled, so a sandbox that ended on its
own (lifetime, idle timeout, out of memory, a terminate from outside the gateway, the agent
failing) left its files in an image that `_experimental_get_exit_snapshot` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import modal
import modal.exception
from modal_proto import api_pb2

from ..base import SuspendReason

__all__ = ["EXIT_SNAPSHOT_OPTIONS", "end_reason", "entrypoint_stderr", "exit_snapshot_image"]

log = logging.getLogger(__name__)

# Every workspace sandbox is created with these: its end leaves a filesystem snapshot.
EXIT_SNAPSHOT_OPTIONS = {"enable_exit_snapshot": True}
# How long one look at an ended sandbox waits for its exit snapshot to be ready (the SDK long
# polls); a snapshot still pending then is looked at again the next time.
EXIT_SNAPSHOT_WAIT_SECONDS = 30.0
# The entrypoint's last stderr lines a failed start reports.
STDERR_LINES = 20

_Status = api_pb2.GenericResult
_REASONS: dict[int, SuspendReason] = {
    _Status.GENERIC_STATUS_TIMEOUT: "lifetime",
    _Status.GENERIC_STATUS_IDLE_TIMEOUT: "idle",
    _Status.GENERIC_STATUS_KERNEL_OOM_KILL: "out_of_memory",
    _Status.GENERIC_STATUS_MEMORY_MANAGER_EVICTION: "out_of_memory",
    _Status.GENERIC_STATUS_MEMORY_THRASHING_EVICTION: "out_of_memory",
    _Status.GENERIC_STATUS_TERMINATED: "terminated",
}


def end_reason(result: api_pb2.GenericResult) -> SuspendReason:
    """Why the sandbox ended, as a suspension says it. The entrypoint is the agent's daemon,
    which never exits on its own while it works: its exit (success or failure) or a failed
    container start is a failed start."""
    return _REASONS.get(int(result.status), "failed_to_start")


async def exit_snapshot_image(sandbox: modal.Sandbox) -> tuple[str | None, str]:
    """The exit snapshot's image id, or None with why there is none. Raises `TimeoutError`
    while it is still being made."""
    try:
        image = await sandbox._experimental_get_exit_snapshot.aio(
            timeout=EXIT_SNAPSHOT_WAIT_SECONDS
        )
    except modal.exception.SnapshotCreationError as exc:
        return None, f"Modal made no exit snapshot: {exc}"
    except modal.exception.InvalidError as exc:
        # A sandbox made before exit snapshots were enabled for every workspace.
        return None, f"the sandbox has no exit snapshot: {exc}"
    except modal.exception.TimeoutError as exc:
        raise TimeoutError(str(exc)) from None
    return str(image.object_id), ""


async def entrypoint_stderr(sandbox: modal.Sandbox, result: api_pb2.GenericResult) -> str:
    """The entrypoint's exit and its last stderr lines (from the sandbox's logs), for a failed
    start; what cannot be read is left out rather than failing the lookup."""
    lines: list[str] = []
    with contextlib.suppress(Exception):
        async with asyncio.timeout(10):
            async for entry in sandbox.logs.tail.aio(STDERR_LINES, source="stderr"):
                lines.extend(entry.message.splitlines())
    head = f"the agent exited with code {result.exitcode}"
    if result.exception:
        head += f" ({result.exception.strip()[:200]})"
    tail = "\n".join(lines[-STDERR_LINES:])
    return f"{head}: {tail}" if tail else head
