"""The error of the agent channel, shared by the client and its parts."""

from __future__ import annotations

import json


class AgentError(RuntimeError):
    """A request failed, or the channel did. `code` is one of the protocol's error codes:
    invalid_argument, not_found, conflict, permission, limit, timeout, unavailable, internal,
    protocol_mismatch."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        # The request's argument at fault, when the agent names one (`path`, `exec_id`, ...).
        self.field = field

    @classmethod
    def from_body(cls, body: str) -> AgentError:
        """The error of an agent's reply: its JSON `{"code", "message", "field"?}`."""
        error = json.loads(body)
        field = error.get("field")
        return cls(
            str(error.get("code", "internal")),
            str(error.get("message", "")),
            field if isinstance(field, str) else None,
        )

    def __repr__(self) -> str:
        return f"AgentError({self.code!r}, {self.message!r}, field={self.field!r})"
