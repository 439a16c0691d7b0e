"""The inputs of every operation, with each client value checked by the Rust policies.

A model that validates carries canonical values only (ids checked, repository rebuilt to its
URL, paths normalised under `/workspace`), so nothing downstream re-parses client text.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo

from . import policy

WORKSPACE_ROOT = "/workspace"
MAX_WAIT_SECONDS = 25
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


def _id(kind: Literal["ws", "ex", "fw"]) -> AfterValidator:
    return AfterValidator(lambda text: policy.check_id(kind, text))


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
    str, _id("ws"), Field(description="Workspace id: 'ws-' and 32 lowercase hex digits.")
]
ExecId = Annotated[str, _id("ex"), Field(description="Exec id: 'ex-' and 32 lowercase hex digits.")]
WatchId = Annotated[
    str, _id("fw"), Field(description="File watch id: 'fw-' and 32 lowercase hex digits.")
]
WorkspacePath = Annotated[
    str,
    AfterValidator(_path),
    Field(
        description="A path inside the workspace: relative to its root (/workspace), or absolute "
        "under it."
    ),
]
Repository = Annotated[
    str,
    AfterValidator(_repository),
    Field(description="GitHub repository: OWNER/REPO or https://github.com/OWNER/REPO."),
]
GitRef = Annotated[
    str,
    AfterValidator(policy.git_ref),
    Field(description="A branch, tag or commit (no leading '-', no revision expressions)."),
]
# Managed keys (`policy.MANAGED_TAGS`, `policy.MANAGED_TAG_PREFIXES`) are refused: a caller
# setting one could forge a workspace's identity, its root, or the record of what was cloned.
Tags = Annotated[dict[str, str], AfterValidator(policy.caller_tags)]
Env = Annotated[dict[str, str], AfterValidator(_env)]
IdempotencyKey = Annotated[str, AfterValidator(policy.idempotency_key)]
Cursor = Annotated[
    int,
    Field(
        ge=0,
        description="The last seq you have seen (next_cursor of the previous page); 0 = start.",
    ),
]
WaitSeconds = Annotated[
    float,
    Field(
        ge=0,
        le=MAX_WAIT_SECONDS,
        description="Long-poll: wait up to this long (0-25 s) for events.",
    ),
]
MaxEvents = Annotated[int, Field(ge=1, le=10_000, description="Most events in one page.")]
MaxBytes = Annotated[
    int,
    Field(
        ge=1024,
        le=MAX_PAGE_BYTES,
        description="Budget of the page's JSON in bytes (48 000 default).",
    ),
]


# --- workspaces ---------------------------------------------------------------------------------


class Resources(Input):
    cpu: float | None = Field(None, gt=0, le=64, description="CPU cores requested.")
    memory_mb: int | None = Field(None, ge=128, le=262_144, description="Memory in MiB.")
    gpu: str | None = Field(
        None, pattern=r"^[A-Za-z0-9:._-]{1,32}$", description="GPU type (Modal)."
    )
    timeout_seconds: int | None = Field(None, ge=60, le=86_400, description="Lifetime limit.")
    idle_timeout_seconds: int | None = Field(None, ge=60, le=86_400, description="Idle limit.")


class WorkspaceCreate(Input):
    resources: Resources = Field(
        default_factory=lambda: Resources.model_validate({}),
        description="What the workspace may use; values the driver cannot enforce are refused.",
    )
    env: Env = Field(default_factory=dict, description="Environment for every command.")
    secret_names: list[str] = Field(
        default_factory=list, max_length=16, description="Allowlisted secrets to expose as env."
    )
    volumes: dict[str, str] = Field(
        default_factory=dict, description="Mount path -> allowlisted volume name (Modal)."
    )
    tags: Tags = Field(default_factory=dict, description="Your labels; managed tags are refused.")
    block_network: bool = Field(False, description="Run with no network access.")
    idempotency_key: IdempotencyKey | None = Field(
        None, description="The same key returns the same workspace instead of a second one."
    )


class WorkspaceList(Input):
    pass


class WorkspaceRef(Input):
    workspace_id: WorkspaceId


# --- execs --------------------------------------------------------------------------------------


class _Command(Input):
    """What every command takes: the shell text, where it runs and its extra environment."""

    workspace_id: WorkspaceId
    command: str = Field(
        min_length=1, max_length=MAX_COMMAND_CHARS, description="Shell command run with bash -lc."
    )
    workdir: WorkspacePath | None = Field(
        None, description="Directory to run in (default /workspace)."
    )
    env: Env = Field(default_factory=dict, description="Extra environment for this command.")


class ExecRun(_Command):
    stdin: str | None = Field(None, max_length=MAX_FILE_BYTES, description="Text sent to stdin.")
    timeout_seconds: float = Field(60, gt=0, le=3600, description="Kill the command after this.")
    wait_seconds: float | None = Field(
        None,
        gt=0,
        le=3600,
        description="How long to wait for the command to end. A command still running then is "
        "answered with state running and its exec_id (it keeps running until timeout_seconds): "
        "follow it with workspace_realtime_exec_events. Default: until it ends.",
    )
    max_output_bytes: int = Field(
        32_000, ge=1024, le=MAX_OUTPUT_BYTES, description="Cap per stream; head and tail kept."
    )


class RealtimeExecStart(_Command):
    timeout_seconds: float | None = Field(None, gt=0, le=86_400, description="Kill after this.")
    pty: bool = Field(False, description="Run in a pseudo-terminal (stdout and stderr merged).")
    idempotency_key: IdempotencyKey | None = Field(
        None, description="The same key returns the exec it started instead of a second one."
    )


class ExecRef(Input):
    workspace_id: WorkspaceId
    exec_id: ExecId


class EventsRead(Input):
    cursor: Cursor = 0
    wait_seconds: WaitSeconds = 5
    max_events: MaxEvents = 1000
    max_bytes: MaxBytes = DEFAULT_PAGE_BYTES


class ExecEvents(EventsRead):
    workspace_id: WorkspaceId
    exec_id: ExecId


class ExecInput(Input):
    workspace_id: WorkspaceId
    exec_id: ExecId
    data: str = Field("", max_length=MAX_FILE_BYTES, description="Bytes for stdin (see encoding).")
    encoding: Literal["utf-8", "base64"] = Field(
        default="utf-8", description="How data is written: utf-8 text or base64 bytes."
    )
    eof: bool = Field(False, description="Close stdin after this data.")


class ExecCancel(Input):
    workspace_id: WorkspaceId
    exec_id: ExecId
    grace_seconds: float = Field(5, ge=0, le=60, description="SIGTERM, then SIGKILL after this.")


class ExecListInput(Input):
    workspace_id: WorkspaceId


# --- git ----------------------------------------------------------------------------------------


class RepoClone(Input):
    workspace_id: WorkspaceId
    repository: Repository
    ref: GitRef | None = Field(
        None, description="A branch, tag or commit (default: the remote's default branch)."
    )
    depth: int | None = Field(None, ge=1, le=1_000_000, description="Shallow clone depth.")
    destination: WorkspacePath | None = Field(None, description="Where to clone (default: REPO).")
    use_github_token: bool = Field(False, description="Authenticate with the configured token.")


class RepoFetch(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath = Field(description="The repository's directory.")
    ref: GitRef | None = Field(
        None, description="A branch, tag or commit (default: the remote's default branch)."
    )
    depth: int | None = Field(None, ge=1, le=1_000_000, description="Shallow fetch depth.")
    use_github_token: bool = Field(
        default=False, description="Authenticate with the configured token."
    )


class RepoCheckout(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath = Field(description="The repository's directory.")
    ref: GitRef
    create_branch: bool = Field(False, description="Create ref as a new branch at HEAD.")


class RepoStatusInput(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath = Field(description="The repository's directory.")


class RepoDiffInput(Input):
    workspace_id: WorkspaceId
    destination: WorkspacePath = Field(description="The repository's directory.")
    cached: bool = Field(False, description="Staged changes instead of the working tree.")
    stat: bool = Field(False, description="A diffstat instead of the patch.")
    max_bytes: int = Field(48_000, ge=1024, le=MAX_OUTPUT_BYTES, description="Cap on the output.")


# --- files --------------------------------------------------------------------------------------


class FileRead(Input):
    workspace_id: WorkspaceId
    path: WorkspacePath
    offset: int = Field(0, ge=0, description="Where to start reading, in bytes.")
    max_bytes: int = Field(
        48_000,
        ge=1,
        le=MAX_FILE_BYTES,
        description="Most bytes to read (fewer may come back, to fit: go on from next_offset).",
    )


class FileWrite(Input):
    workspace_id: WorkspaceId
    path: WorkspacePath
    content: str = Field(
        max_length=2 * MAX_FILE_BYTES, description="The whole file's new content (see encoding)."
    )
    encoding: Literal["utf-8", "base64"] = Field(
        default="utf-8", description="How content is written: utf-8 text or base64 bytes."
    )
    create_parents: bool = Field(default=True, description="Create missing parent directories.")


class FileEdit(Input):
    workspace_id: WorkspaceId
    path: WorkspacePath
    old: str = Field(min_length=1, max_length=MAX_FILE_BYTES, description="Exact text to replace.")
    new: str = Field(max_length=MAX_FILE_BYTES, description="Replacement text.")
    expected_replacements: int | None = Field(
        None, ge=1, description="Fail unless exactly this many matches (default: exactly one)."
    )


class FileList(Input):
    workspace_id: WorkspaceId
    path: WorkspacePath = "."
    depth: int = Field(1, ge=1, le=32, description="Levels to list: 1 = the directory's entries.")
    max_entries: int = Field(1000, ge=1, le=10_000, description="Most entries to return.")


class FileRemove(Input):
    workspace_id: WorkspaceId
    path: WorkspacePath
    recursive: bool = Field(
        default=False, description="Remove a directory and everything under it."
    )


class FileSearch(Input):
    workspace_id: WorkspaceId
    pattern: str = Field(
        min_length=1,
        max_length=1024,
        description="A regular expression (content) or a glob (name).",
    )
    mode: Literal["content", "name"] = Field(
        "content", description="content: regex over file text; name: glob over paths."
    )
    path: WorkspacePath = "."
    glob: str | None = Field(None, max_length=1024, description="Only files matching this glob.")
    case_insensitive: bool = Field(default=False, description="Match regardless of case.")
    max_results: int = Field(200, ge=1, le=10_000, description="Most matches to return.")


# --- file watches -------------------------------------------------------------------------------


class WatchStart(Input):
    workspace_id: WorkspaceId
    path: WorkspacePath = "."
    kinds: list[Literal["create", "modify", "remove", "rename"]] | None = Field(
        default=None,
        description="The changes to report (default all): create, modify, remove, rename.",
    )
    timeout_seconds: float | None = Field(
        None, gt=0, le=86_400, description="End the watch after this."
    )


class WatchRef(Input):
    workspace_id: WorkspaceId
    watch_id: WatchId


class WatchEvents(EventsRead):
    workspace_id: WorkspaceId
    watch_id: WatchId


class WatchListInput(Input):
    workspace_id: WorkspaceId


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


__all__ = sorted(
    name
    for name, value in list(globals().items())
    if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == __name__
)
