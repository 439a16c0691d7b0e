"""The one error model of the gateway (docs/architecture.md §5.3): a code, a message, an HTTP
status.

REST renders these as `{"error": {"code", "message", "field"?}}`, MCP as `isError` results with
the same text; policy rejections and the agent's error codes are translated here, in one place.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ._core import PolicyError

if TYPE_CHECKING:
    # Only for annotations: the agent channel imports this module and must stay light.
    from pydantic import ValidationError

__all__ = [
    "AgentError",
    "ConflictError",
    "InsufficientScopeError",
    "InvalidArgumentError",
    "LimitError",
    "NotFoundError",
    "PermissionDeniedError",
    "TimeoutError_",
    "UnauthenticatedError",
    "UpstreamError",
    "WorkspaceError",
    "core_refusal",
    "denied",
    "from_agent_error",
    "from_policy_error",
    "invalid_from_details",
    "naming",
    "translate_error",
    "validation_error",
    "without_host_paths",
]

# Under the name these lines had before the runtime split, so that a deployment's log filters
# still catch them.
log = logging.getLogger("modal_workspace_core.service")


class WorkspaceError(Exception):
    """A failure the caller should see: `code` is stable, `message` says what to do about it.

    `field` names the input that was wrong, when one was. Messages never contain a token or a
    secret value: they are built from the caller's own (policy-checked) input and fixed text.
    """

    status: int = 500
    default_code: ClassVar[str] = "internal"

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return {"error": body}

    def __str__(self) -> str:
        where = f" (field {self.field!r})" if self.field else ""
        return f"{self.code}: {self.message}{where}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r}, field={self.field!r})"


class _Kind(WorkspaceError):
    """A subclass with a fixed code: `NotFoundError("message")`, or `(code, message)` to keep a
    more specific code (for example `LimitError("rate_limited", "...", status=429)`)."""

    def __init__(
        self,
        code_or_message: str,
        message: str | None = None,
        field: str | None = None,
        *,
        status: int | None = None,
    ) -> None:
        if message is None:
            code, message = self.default_code, code_or_message
        else:
            code = code_or_message
        super().__init__(code, message, field)
        if status is not None:
            self.status = status


class InvalidArgumentError(_Kind):
    status = 400
    default_code = "invalid_argument"


class UnauthenticatedError(_Kind):
    status = 401
    default_code = "unauthenticated"


class PermissionDeniedError(_Kind):
    status = 403
    default_code = "permission"


class InsufficientScopeError(_Kind):
    """The caller's OAuth token does not grant the operation (RFC 6750 §3.1)."""

    status = 403
    default_code = "insufficient_scope"


class NotFoundError(_Kind):
    status = 404
    default_code = "not_found"


class ConflictError(_Kind):
    status = 409
    default_code = "conflict"


class LimitError(_Kind):
    """A bound was hit: 413 for a request too large (the default), 429 for too many."""

    status = 413
    default_code = "limit"


class UpstreamError(_Kind):
    """The workspace or its provider failed in a way the caller cannot fix (502)."""

    status = 502
    default_code = "upstream"


class TimeoutError_(_Kind):  # the trailing underscore keeps the builtin usable
    status = 504
    default_code = "timeout"


# The agent's codes (docs/protocol.md) and the kind each becomes for our callers.
_AGENT_CODES: dict[str, type[_Kind]] = {
    "invalid_argument": InvalidArgumentError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "permission": PermissionDeniedError,
    "limit": LimitError,
    "timeout": TimeoutError_,
    "unavailable": UpstreamError,
    "protocol_mismatch": UpstreamError,
    "internal": UpstreamError,
}


class AgentError(WorkspaceError, RuntimeError):  # a RuntimeError, as it was before the family
    """A request to a workspace agent failed, or the channel to it did.

    One of the family: `code` is the protocol's error code (invalid_argument, not_found,
    conflict, permission, limit, timeout, unavailable, internal, protocol_mismatch), `status`
    the HTTP status it stands for, and `for_caller` the same failure under the code a caller
    sees (the agent's own failures all read `upstream`).
    """

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(code, message, field)
        self.status = _AGENT_CODES.get(code, UpstreamError).status

    @classmethod
    def from_body(cls, body: str | bytes) -> AgentError:
        """The error of an agent's reply: its JSON `{"code", "message", "field"?}`."""
        error = json.loads(body)
        field = error.get("field")
        return cls(
            str(error.get("code", "internal")),
            str(error.get("message", "")),
            field if isinstance(field, str) else None,
        )

    @property
    def channel_lost(self) -> bool:
        """The channel is gone (not this request refused): the next use must open a new one."""
        return self.code == "unavailable"

    def for_caller(self, field: str | None = None) -> WorkspaceError:
        """This failure as a caller sees it; `field` (the caller's name for the input) wins over
        the agent's. Unknown codes are the agent's failure, not the caller's: `upstream`."""
        field = field or self.field
        kind = _AGENT_CODES.get(self.code)
        if kind is None:
            return UpstreamError(
                f"the workspace agent failed ({self.code}): {self.message}", field=field
            )
        code = self.code if kind is not UpstreamError else "upstream"
        return kind(code, self.message, field)

    def to_dict(self) -> dict[str, Any]:
        return self.for_caller().to_dict()


def from_agent_error(code: str, message: str, field: str | None = None) -> WorkspaceError:
    """An agent error code and message as the caller's error (`AgentError.for_caller`)."""
    return AgentError(code, message, field).for_caller()


# The core's rules whose refusal is a permission's, not a malformed input's: an allowlist's
# denial (of a name, or of more GPUs than it allows), and a download link whose signature or
# lifetime does not hold (one that cannot even be read, `link.malformed`, is the caller's
# malformed input).
_PERMISSION_RULES = ("allowlist.denied", "allowlist.count", "link.")


def from_policy_error(
    err: PolicyError, field: str | None, about: str | None = None
) -> WorkspaceError:
    """The core's refusal of the input named `field` as the gateway's error: 403 for a
    permission's rule, else 400. The message is led by `about` (default: the field's name)."""
    rule = str(getattr(err, "rule", ""))
    lead = about if about is not None else field
    message = f"{lead}: {err}" if lead else str(err)
    denied = rule != "link.malformed" and any(rule.startswith(r) for r in _PERMISSION_RULES)
    if denied:
        return PermissionDeniedError(message, field=field)
    return InvalidArgumentError(message, field=field)


def denied(message: str, field: str | None) -> PermissionDeniedError:
    """For `core_refusal(error=denied)`: a refusal that is a permission's whatever its rule."""
    return PermissionDeniedError(message, field=field)


@contextlib.contextmanager
def core_refusal(
    field: str | None,
    *,
    about: str | None = None,
    error: Callable[[str, str | None], Exception] | None = None,
) -> Iterator[None]:
    """Runs the core's rules inside: a `PolicyError` they raise leaves as the gateway's error
    for `field` (`from_policy_error`), or as `error(message, field)` where the caller's family
    is another (a setting's `ConfigError`, a denial that is always a permission's). The one
    place a refusal of the core is translated; no caller catches `PolicyError` itself."""
    try:
        yield
    except PolicyError as exc:
        translated = from_policy_error(exc, field, about)
        if error is None:
            raise translated from None
        raise error(translated.message, field) from None


@contextlib.contextmanager
def naming(field: str, *kinds: type[WorkspaceError]) -> Iterator[None]:
    """A failure of one of `kinds` raised inside that names no field leaves naming `field`:
    the agent's file errors say which path they met, the operation knows which input gave it."""
    try:
        yield
    except WorkspaceError as err:
        if err.field is None and isinstance(err, kinds):
            err.field = field
        raise


def invalid_from_details(errors: Sequence[Mapping[str, Any]]) -> InvalidArgumentError:
    """The first problem of a pydantic (or FastAPI) error list as one message naming the field."""
    if not errors:
        return InvalidArgumentError("the request is malformed")
    first = errors[0]
    parts = [str(p) for p in first.get("loc", ())]
    if len(parts) > 1 and parts[0] in ("body", "query", "path"):
        parts = parts[1:]  # FastAPI's own prefix says where the value was, not which it was
    loc = ".".join(parts)
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    kind = first.get("type")
    if kind == "extra_forbidden":
        message = "unknown field"
    elif kind == "missing":
        message = "required"
    elif kind == "json_invalid":
        message, loc = "the body is not valid JSON", ""
    return InvalidArgumentError(f"{loc}: {message}" if loc else message, field=loc or None)


def validation_error(exc: ValidationError) -> InvalidArgumentError:
    return invalid_from_details(exc.errors(include_url=False))


def without_host_paths(err: WorkspaceError, hidden: Sequence[str]) -> WorkspaceError:
    """`err` with every hidden host path in its message replaced: a safety net under each
    driver's own messages, which name workspace paths only."""
    for path in sorted(hidden, key=len, reverse=True):
        if path and path in err.message:
            err.message = err.message.replace(path, "<data root>")
            err.args = (err.message,)
    return err


def translate_error(exc: BaseException, field: str | None = None) -> WorkspaceError:
    """Any failure below the operations (the agent's, a policy's, the channel's, a bug), as the
    error a caller sees; a failure outside the family is logged with its traceback, and its
    caller learns only its type."""
    if isinstance(exc, AgentError):
        return exc.for_caller(field)
    if isinstance(exc, WorkspaceError):
        return exc
    if isinstance(exc, PolicyError):
        return from_policy_error(exc, field or "input")
    if isinstance(exc, TimeoutError):
        return TimeoutError_("the workspace did not answer in time; try again")
    if isinstance(exc, ConnectionError | EOFError | OSError):
        return UpstreamError("the channel to the workspace agent failed; try again")
    log.exception("unexpected failure", exc_info=exc)
    return UpstreamError(f"unexpected failure in the gateway ({type(exc).__name__})")
