"""Type stubs for the compiled core, `modal_workspace_core._core`. Kept in step with `src/`."""

from collections.abc import Sequence
from typing import Literal, final

__version__: str

class PolicyError(ValueError):
    """An input was refused by a policy.

    The message says what was wrong and quotes at most a short prefix of the input; `rule` is a
    stable name of the rule that failed (for example `"ref.double-dot"`).
    """

    rule: str

# --- policy -------------------------------------------------------------------------------------

_IdKind = Literal["ws", "ex", "fw", "sn"]

@final
class GitHubRepo:
    """A GitHub repository that passed the policy. Made only by `github_repo`; immutable."""

    @property
    def owner(self) -> str:
        """The owner: 1-39 letters, digits or `-`, not starting or ending with `-`."""
    @property
    def name(self) -> str:
        """The repository name without `.git`: 1-100 letters, digits, `.`, `_` or `-`."""
    @property
    def slug(self) -> str:
        """`OWNER/REPO`."""
    @property
    def url(self) -> str:
        """`https://github.com/OWNER/REPO.git`, the only URL git is given."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

def github_repo(text: str) -> GitHubRepo:
    """Parse `OWNER/REPO`, `OWNER/REPO.git` or `https://github.com/OWNER/REPO` (optional `.git`
    and one trailing slash; scheme and host compared case-insensitively).

    Raises `PolicyError` for anything else: other schemes, hosts and look-alikes, userinfo and
    tokens (never echoed), ports, query, fragment, percent-escapes, whitespace and control
    characters, `.`/`..` segments, extra or missing parts, names outside GitHub's rules,
    scp-like and `ext::` forms, backslashes, and inputs over 256 characters.
    """

def git_ref(text: str) -> str:
    """Check a branch, tag or commit name and return it unchanged.

    The rules of `git check-ref-format --allow-onelevel`, plus: no leading `-` or `+`, no
    component starting with `-`, not `HEAD` nor a one-level all-caps name ending in `HEAD`, and
    at most 255 bytes. Raises `PolicyError`.
    """

def workspace_path(root: str, path: str) -> str:
    """Resolve `path` lexically under `root` (absolute and normalised) and return the normalised
    absolute path, without a trailing slash (`root` itself for `.`).

    Raises `PolicyError` for an absolute path outside `root`, any `..` that climbs above `root`,
    NUL or control characters, an empty path, components over 255 bytes, paths over 4096 bytes.
    Symlinks are not resolved: this decides permission, not where I/O lands.
    """

def new_id(kind: _IdKind) -> str:
    """A fresh id: `kind`, `-`, and 32 lowercase hex digits from the OS's random source.

    Raises `PolicyError` (rule `id.kind`) for an unknown kind.
    """

def check_id(kind: _IdKind, text: str) -> str:
    """Check that `text` is an id of `kind` and return it unchanged. Raises `PolicyError`."""

def env_name(text: str) -> str:
    """Check an environment variable name (`[A-Za-z_][A-Za-z0-9_]*`, at most 255 bytes) and
    return it unchanged. Raises `PolicyError`."""

def allowed(name: str, allowlist: Sequence[str], setting: str) -> str:
    """Check that `name` is a valid Modal object name (1-64 of `[A-Za-z0-9._-]`) that appears
    exactly (case-sensitively) in `allowlist`, and return it. Deny by default: an empty list
    denies everything.

    `setting` is the name of the configuration setting that holds the list; the `PolicyError`
    message tells the operator to change it and never lists the names that are allowed.
    """
