"""The SDK's exceptions in the gateway's error model: what a Modal failure means to a caller."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import modal
import modal.exception

from ...config import ALLOWED_SECRETS_ENV
from ...errors import (
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    UpstreamError,
    WorkspaceError,
)

__all__ = ["missing_objects", "modal_errors"]


@contextlib.asynccontextmanager
async def modal_errors(workspace_id: str) -> AsyncIterator[None]:
    """Turn the SDK's exceptions into the gateway's error model, naming the workspace."""
    try:
        yield
    except WorkspaceError:
        raise
    except modal.exception.NotFoundError:
        raise NotFoundError(
            "not_found", f"workspace {workspace_id} does not exist", "workspace_id"
        ) from None
    except modal.exception.AlreadyExistsError:
        raise ConflictError(
            "conflict", f"workspace {workspace_id} already exists", "workspace_id"
        ) from None
    except modal.exception.InvalidError as exc:
        raise InvalidArgumentError(
            "invalid_argument", f"Modal refused the request: {exc}"
        ) from None
    except modal.exception.Error as exc:
        raise UpstreamError(
            "upstream", f"Modal failed for workspace {workspace_id}: {type(exc).__name__}: {exc}"
        ) from None


@contextlib.asynccontextmanager
async def missing_objects() -> AsyncIterator[None]:
    """While creating, "not found" means a secret, volume or image named in the request or the
    configuration is missing in Modal, not the workspace; and a secret that lacks a variable
    the allowlist lists for it is refused by Modal (FAILED_PRECONDITION, "Secret is missing
    key(s): …")."""
    try:
        yield
    except modal.exception.NotFoundError as exc:
        raise UpstreamError(
            "upstream", f"Modal has no such object: {exc}; create it or fix the configuration"
        ) from None
    except modal.exception.ConflictError as exc:
        if "missing key" not in str(exc):
            raise
        raise UpstreamError(
            "upstream",
            f"a Modal secret lacks a variable that {ALLOWED_SECRETS_ENV} lists for it ({exc}); "
            "add the variable to the secret or fix the setting",
        ) from None
