"""The error of the agent channel, shared by the client and its parts."""

from __future__ import annotations


class AgentError(RuntimeError):
    """A request failed, or the channel did. `code` is one of the protocol's error codes:
    invalid_argument, not_found, conflict, permission, limit, timeout, unavailable, internal,
    protocol_mismatch."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"AgentError({self.code!r}, {self.message!r})"
