"""What every operation's inputs and outputs are made of.

Inputs refuse unknown fields and check each client value with the Rust policies, so a model that
validates carries canonical values only (ids checked, repository rebuilt to its URL, paths
normalised under `/workspace`) and nothing downstream re-parses client text. Outputs keep what
the agent adds (`Open`), so a newer agent's fields reach clients without a gateway release.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
)

from ... import policy
from ..._core import MIN_PAGE_BYTES, StreamKind
from ...errors import InvalidArgumentError
from ...policy import WORKSPACE_ROOT
from .fitting import Shrink, check_declared

MAX_WAIT_SECONDS = 25
# A long-poll's wait when the client names none: under the 5 s read timeout HTTP clients commonly
# default to, with a margin, so that a client with default timeouts never times out on a quiet
# stream (an empty page just means: call again).
DEFAULT_WAIT_SECONDS = 4
DEFAULT_PAGE_BYTES = 48_000  # one page stays well under GPT Actions' 100 000 characters
MAX_PAGE_BYTES = 1_048_576
MAX_COMMAND_CHARS = 65_536
MAX_ENV_VALUE_CHARS = 32_768
MAX_OUTPUT_BYTES = 1_048_576
MAX_FILE_BYTES = 8 * 1024 * 1024


class Input(BaseModel):
    """Unknown fields are refused: a misspelt option must not be silently ignored. Defaults
    pass the same validators as client values, so a default path is canonical too."""

    model_config = ConfigDict(extra="forbid", validate_default=True)


def _id(kind: Literal["ws", "ex", "fw", "sn"]) -> AfterValidator:
    return AfterValidator(lambda text: policy.check_id(kind, text))


def core_pattern(pattern: str) -> Any:
    """A field's schema `pattern`, given by the core rule that checks the field (`id_pattern`
    and its kin): the one source the REST routes' path patterns come from too, so a schema
    never forbids what the core accepts, nor the reverse."""
    return Field(json_schema_extra={"pattern": pattern})


def _path(text: str, info: ValidationInfo) -> str:
    # A workspace whose commands run in another directory (an unisolated local one) reports that
    # directory as its root: a path under it names the same file as under /workspace. The Rust
    # policy then checks the result like any other path (`..` cannot climb out of either).
    root = str((info.context or {}).get("root") or WORKSPACE_ROOT).rstrip("/")
    if root != WORKSPACE_ROOT and (text == root or text.startswith(root + "/")):
        text = WORKSPACE_ROOT + text[len(root) :]
    return policy.workspace_path(WORKSPACE_ROOT, text)


def _repository(text: str) -> str:
    return policy.github_repo(text).url


def _command(text: str) -> str:
    # The command reaches bash as one argument, and no argument can carry a NUL (it would end
    # there): refused here rather than started and answered "failed".
    if "\x00" in text:
        raise ValueError("a command must hold no NUL byte")
    return text


def _env(env: dict[str, str]) -> dict[str, str]:
    for key, value in env.items():
        policy.env_name(key)
        if "\x00" in value or len(value) > MAX_ENV_VALUE_CHARS:
            raise ValueError(
                f"env {key}: a value must be at most 32 768 characters and hold no NUL"
            )
    if len(env) > 256:
        raise ValueError("at most 256 environment variables")
    return env


WorkspaceId = Annotated[
    str,
    _id("ws"),
    core_pattern(policy.id_pattern("ws")),
    Field(description="Workspace id: 'ws-' and 32 lowercase hex digits."),
]
ExecId = Annotated[
    str,
    _id("ex"),
    core_pattern(policy.id_pattern("ex")),
    Field(description="Exec id: 'ex-' and 32 lowercase hex digits."),
]
WatchId = Annotated[
    str,
    _id("fw"),
    core_pattern(policy.id_pattern("fw")),
    Field(description="File watch id: 'fw-' and 32 lowercase hex digits."),
]
RunId = Annotated[
    str,
    _id("xp"),
    core_pattern(policy.id_pattern("xp")),
    Field(description="An experiment run's id: 'xp-' and 32 lowercase hex digits."),
]
SnapshotId = Annotated[
    str,
    _id("sn"),
    core_pattern(policy.id_pattern("sn")),
    Field(description="A snapshot's id: 'sn-' and 32 lowercase hex digits."),
]


def _stream_id(text: str) -> str:
    StreamKind.of(text)  # the core decides which ids name a stream (and of what kind)
    return text


StreamId = Annotated[
    str,
    AfterValidator(_stream_id),
    core_pattern(StreamKind.id_pattern()),
    Field(description="An exec_id, a watch_id, a progress_stream_id or a metrics stream_id."),
]
WorkspacePath = Annotated[
    str,
    AfterValidator(_path),
    Field(description="Relative to /workspace, or absolute under it."),
]
Repository = Annotated[
    str,
    AfterValidator(_repository),
    Field(description="OWNER/REPO or https://github.com/OWNER/REPO."),
]
GitRef = Annotated[
    str,
    AfterValidator(policy.git_ref),
    Field(description="A branch, tag or commit (no leading '-', no revision expressions)."),
]
TemplateName = Annotated[
    str,
    AfterValidator(policy.template_name),
    core_pattern(policy.template_name_pattern()),
    Field(description="A template's name."),
]
# Managed keys (`policy.MANAGED_TAGS`, `policy.MANAGED_TAG_PREFIXES`) are refused: a caller
# setting one could forge a workspace's identity, its root, or the record of what was cloned.
Tags = Annotated[dict[str, str], AfterValidator(policy.caller_tags)]
Env = Annotated[dict[str, str], AfterValidator(_env)]
# The TCP ports a workspace serves previews on (`workspace_preview_url`), the core's rule.
PreviewPorts = Annotated[
    list[int],
    Field(max_length=policy.MAX_PREVIEW_PORTS),
    AfterValidator(policy.preview_ports),
]
PreviewPort = Annotated[
    int,
    AfterValidator(policy.preview_port),
    Field(description="Declared at create."),
]
# A name a client gives what it makes (a snapshot, a run).
Label = Annotated[
    str,
    AfterValidator(policy.snapshot_label),
    Field(description="Your name for it: at most 64 printable characters."),
]
Command = Annotated[
    str, Field(min_length=1, max_length=MAX_COMMAND_CHARS), AfterValidator(_command)
]
IdempotencyKey = Annotated[str, AfterValidator(policy.idempotency_key)]
Cursor = Annotated[
    int,
    Field(
        ge=0,
        description="The previous page's next_cursor; 0 at first.",
    ),
]
WaitSeconds = Annotated[
    float,
    Field(
        ge=0,
        le=MAX_WAIT_SECONDS,
        description="Long-poll: wait up to this long for an event.",
    ),
]
MaxEvents = Annotated[int, Field(ge=1, le=10_000, description="Most per page.")]
MaxBytes = Annotated[
    int,
    Field(
        # The core's smallest page: it holds the largest event (a smaller budget was raised to
        # it, and a page answered over what was asked).
        ge=MIN_PAGE_BYTES,
        le=MAX_PAGE_BYTES,
        description="Most bytes of the page's JSON.",
    ),
]


def _timestamp(value: Any) -> Any:
    # The agent may report epoch seconds; clients get one format, RFC 3339 in UTC.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC).isoformat().replace("+00:00", "Z")
    return value


Timestamp = Annotated[str | None, BeforeValidator(_timestamp)]


class Output(BaseModel):
    model_config = ConfigDict(extra="ignore")

    # How the answer gives less when a surface bounds its JSON (`fitting.fit_json`), in the
    # order it gives it up: an output with a field that can grow past the bound declares it
    # here, on its class (`KeepFirst("entries")`); one that declares nothing is never cut.
    gives_less: ClassVar[tuple[Shrink, ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        check_declared(cls, cls.gives_less)

    # Any call may find its workspace suspended and resume it first; the answer then says so
    # (and is absent otherwise).
    resumed_from: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="The snapshot this call resumed the suspended workspace from, when it did.",
    )


class ImageAnswer(Output):
    """An answer that carries a picture: MCP sends it as image content beside this JSON, REST as
    the bytes themselves (`media_type`), the Python API as `image`. The bytes are never in the
    JSON (nor its schema)."""

    media_type: str = Field(description="The picture's type.")
    size_bytes: int = Field(description="Its size.")
    _image: bytes = PrivateAttr(default=b"")

    @property
    def image(self) -> bytes:
        return self._image

    def carrying(self, image: bytes) -> ImageAnswer:
        self._image = image
        return self


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorBody(BaseModel):
    code: str = Field(description="invalid_argument, not_found, conflict, permission, ...")
    message: str = Field(description="What went wrong and, where it helps, what to do.")
    field: str | None = Field(default=None, description="The input field at fault, when one is.")


class ErrorResponse(BaseModel):
    error: ErrorBody = Field(description="The error.")


def path_fields(model: type[BaseModel]) -> frozenset[str]:
    """The names of the model's `WorkspacePath` fields."""

    def is_path(metadata: Iterable[object], annotation: object) -> bool:
        if any(getattr(meta, "func", None) is _path for meta in metadata):
            return True
        return any(is_path(getattr(arg, "__metadata__", ()), arg) for arg in get_args(annotation))

    return frozenset(
        name
        for name, field in model.model_fields.items()
        if is_path(field.metadata, field.annotation)
    )


def decode_input(text: str, encoding: str, field: str) -> bytes:
    """A client's text as bytes: base64 when `encoding` says so (refused unless valid), else
    UTF-8. A refusal names `field`."""
    if encoding != "base64":
        return text.encode()
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgumentError(f"{field}: not valid base64", field=field) from None


def derived_id(kind: Literal["ws", "ex"], scope: str, key: str, secret: bytes) -> str:
    """The id of `kind` an idempotency key names within `scope`: the same key, the same id, on
    every gateway of a deployment (they share `secret`), so that the driver's own uniqueness of
    ids settles a race between two of them. Keyed with the gateway's secret, so that nothing in
    a workspace can compute the id ahead of the client and take it first."""
    digest = hmac.new(secret, f"{scope}\x00{key}".encode(), hashlib.sha256).hexdigest()
    return policy.check_id(kind, f"{kind}-{digest[:32]}")
