"""The one error family of the gateway: each error has a code, an HTTP status and a message.

Messages say what was wrong and what to do, name the field when there is one, and never
contain a token or a secret value (ARCHITECTURE.md §4.3).
"""

from __future__ import annotations


class WorkspaceError(Exception):
    """An operation failed in a way the caller can act on."""

    status: int = 500

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


class InvalidArgumentError(WorkspaceError):
    status = 400


class NotFoundError(WorkspaceError):
    status = 404


class ConflictError(WorkspaceError):
    status = 409


class PermissionDeniedError(WorkspaceError):
    status = 403


class UnauthenticatedError(WorkspaceError):
    status = 401


class LimitError(WorkspaceError):
    status = 429


class UpstreamError(WorkspaceError):
    status = 502


class TimeoutError_(WorkspaceError):
    status = 504
