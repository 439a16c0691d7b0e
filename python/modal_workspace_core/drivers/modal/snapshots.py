"""A workspace's files as Modal images: taking a filesystem snapshot, opening one to start a
sandbox from, deleting one. The records of them are in `records`."""

from __future__ import annotations

import contextlib
import logging

import modal
import modal.exception
import modal.experimental

from ...errors import ConflictError, UpstreamError
from .lookup import image_exists

__all__ = ["delete_image", "open_image", "take_filesystem_snapshot"]

log = logging.getLogger(__name__)


async def take_filesystem_snapshot(
    sandbox: modal.Sandbox,
    workspace_id: str,
    snapshot_id: str,
    *,
    ttl_seconds: int | None,
    timeout: int,
) -> str:
    """The image id of a snapshot of the running sandbox's filesystem, once Modal has it.

    `ttl=None` keeps the image until it is deleted (the SDK's default would silently expire it
    after 30 days); the timeout is ours, well above the SDK's 55 s default. A snapshot that
    overruns, or whose sandbox ended meanwhile, is an error and nothing is recorded."""
    try:
        image = await sandbox.snapshot_filesystem.aio(timeout=timeout, ttl=ttl_seconds)
    except (modal.exception.TimeoutError, TimeoutError):
        raise UpstreamError(
            "upstream",
            f"snapshot {snapshot_id} of workspace {workspace_id} did not finish within "
            f"{timeout} s; nothing was recorded",
            "snapshot_id",
        ) from None
    except modal.exception.Error as exc:
        with contextlib.suppress(modal.exception.Error):
            await sandbox.poll.aio()
        if sandbox.returncode is not None:
            raise ConflictError(
                "conflict",
                f"workspace {workspace_id} ended while snapshot {snapshot_id} was being taken "
                f"({exc}); nothing was recorded: its files are in the exit snapshot the "
                "workspace's end left, which is recorded the next time it is looked at",
                "workspace_id",
            ) from None
        raise UpstreamError(
            "upstream",
            f"Modal could not snapshot workspace {workspace_id}: {type(exc).__name__}: {exc}",
        ) from None
    return str(image.object_id)


async def open_image(snapshot_id: str, image_id: str) -> modal.Image:
    """The snapshot's image, once Modal has answered for it: proof that a sandbox can still start
    from it. An
    image that expired at Modal or was deleted is a conflict naming the snapshot, so that a
    resume or fork never quietly starts from something else."""
    try:
        await image_exists(image_id)
    except modal.exception.Error as exc:
        raise ConflictError(
            "conflict",
            f"snapshot {snapshot_id} cannot be opened: {type(exc).__name__}: {exc}",
            "snapshot_id",
        ) from None
    return modal.Image.from_id(image_id)


async def delete_image(image_id: str) -> None:
    """Deletes a snapshot's image at Modal (an image kept until deleted costs until then). Its
    record is already gone; an image Modal no longer has is fine."""
    try:
        await modal.experimental.image_delete.aio(image_id)
    except modal.exception.NotFoundError:
        pass
    except modal.exception.Error as exc:
        log.warning("could not delete snapshot image %s at Modal: %s", image_id, exc)
