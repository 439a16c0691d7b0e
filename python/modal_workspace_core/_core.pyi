"""Type stubs for the compiled core, `modal_workspace_core._core`. Kept in step with `src/`."""

from collections.abc import Sequence
from typing import Any, Literal, Self, final

from typing_extensions import disjoint_base

__all__ = [
    "AGENT_OPS",
    "CHANNEL_KEEPALIVE_SECONDS",
    "FINAL_STATES",
    "GPU_TYPES",
    "IDEMPOTENCY_TAG",
    "MANAGED_TAGS",
    "MANAGED_TAG_PREFIXES",
    "MAX_ALLOWLIST_ENTRIES",
    "MAX_CPU_CORES",
    "MAX_GPU_COUNT",
    "MAX_IMAGE_PACKAGES",
    "MAX_MEMORY_MIB",
    "MAX_METRIC_LINE_BYTES",
    "MAX_METRIC_NAMES",
    "MAX_PATCH_BYTES",
    "MAX_PATCH_FILES",
    "MAX_PREVIEW_PORTS",
    "MAX_REGIONS",
    "MAX_TAGS",
    "MAX_TICKET_SECONDS",
    "METRIC_PREFIX",
    "MIN_CPU_CORES",
    "MIN_MEMORY_MIB",
    "MIN_PAGE_BYTES",
    "MIN_PREVIEW_PORT",
    "REPEATABLE_AGENT_OPS",
    "WORKSPACE_TAGS",
    "AgentChannel",
    "ChannelFailure",
    "ChannelRefusal",
    "EventRing",
    "GitHubRepo",
    "MetricLines",
    "Page",
    "PolicyError",
    "RingError",
    "StreamKind",
    "TreeError",
    "TreeProgress",
    "_LoopBell",
    "_RingWatch",
    "__version__",
    "agent_main",
    "allowed",
    "allowed_function",
    "allowed_gpu",
    "author_email",
    "author_name",
    "caller_tags",
    "check_id",
    "check_patch",
    "commit_message",
    "copy_tree",
    "cpu_cores",
    "cpu_limit",
    "empty_dir",
    "env_name",
    "function_allowlist",
    "function_call_id",
    "function_call_id_pattern",
    "git_ref",
    "github_base",
    "github_repo",
    "gpu",
    "gpu_allowlist",
    "id_pattern",
    "idempotency_key",
    "image_id",
    "image_name",
    "image_packages",
    "memory_limit_mib",
    "memory_mib",
    "metric_line",
    "mint_link",
    "mint_ticket",
    "modal_app_name",
    "modal_app_name_pattern",
    "modal_function_name",
    "name_allowlist",
    "new_id",
    "outbound_allowlists",
    "outbound_cidr",
    "outbound_domain",
    "parse_page",
    "preview_host",
    "preview_host_target",
    "preview_origin_host",
    "preview_port",
    "preview_ports",
    "pull_request_body",
    "pull_request_title",
    "region",
    "regions",
    "remove_tree",
    "secret_allowlist",
    "snapshot_label",
    "stored_tag",
    "template_name",
    "template_name_pattern",
    "tree_usage",
    "verify_link",
    "verify_ticket",
    "volume_mount",
    "workspace_path",
]

__version__: str

class PolicyError(ValueError):
    """An input was refused by a policy.

    The message says what was wrong and quotes at most a short prefix of the input; `rule` is a
    stable name of the rule that failed (for example `"ref.double-dot"`).
    """

    rule: str

class ChannelRefusal(ValueError):
    """The agent channel refused a call for its arguments (`code`: `invalid_argument`, or
    `limit` when a bound is full), or a page that cannot be read (`code`: `internal`)."""

    code: str

class ChannelFailure(ConnectionError):
    """The agent channel cannot go on (`code`: the protocol's error code, such as
    `unavailable`)."""

    code: str

class RingError(PolicyError):
    """An event ring or log refused a call: a bound that is not positive, a cursor past the
    stream's end, an append after it closed. A `PolicyError`, as these were before they had a
    class of their own; `rule` names what failed (`ring.closed`, `ring.cursor-ahead`, …)."""

# --- policy -------------------------------------------------------------------------------------

_IdKind = Literal["ws", "ex", "fw", "sn", "tk", "mt", "xp"]

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
        """`https://github.com/OWNER/REPO.git`: the repository's identity (its `repo-url` tag)."""
    def url_on(self, base: str) -> str:
        """`BASE/OWNER/REPO.git` on a base URL `github_base` accepts: the only URL git is given.
        Raises `PolicyError` for a bad base."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

def github_base(text: str) -> str:
    """Check a GitHub base URL (`MODAL_WORKSPACE_GITHUB_URL`, `MODAL_WORKSPACE_GITHUB_API_URL`)
    and return it canonical: `http(s)://HOST[:PORT][/PATH]`, scheme and host lowercased, no
    trailing slash. Raises `PolicyError` for other schemes, userinfo (never echoed), query,
    fragment, percent-escapes, whitespace, control characters, dot segments or a bad port."""

def github_repo(text: str) -> GitHubRepo:
    """Parse `OWNER/REPO`, `OWNER/REPO.git` or `https://github.com/OWNER/REPO` (optional `.git`
    and one trailing slash; scheme and host compared case-insensitively).

    Raises `PolicyError` for anything else: other schemes, hosts and look-alikes, userinfo and
    tokens (never echoed), ports, query, fragment, percent-escapes, whitespace and control
    characters, `.`/`..` segments, extra or missing parts, names outside GitHub's rules,
    scp-like and `ext::` forms, backslashes, and inputs over 256 characters.
    """

def commit_message(text: str) -> str:
    """Check a commit message and return it unchanged: not blank, at most 64 KiB, no NUL nor
    control characters other than newline, tab and carriage return. Raises `PolicyError`."""

def author_name(text: str) -> str:
    """Check a commit author's name and return it unchanged: 1-256 characters, no `<`, `>` or
    control characters, not only spaces and punctuation. Raises `PolicyError`."""

def author_email(text: str) -> str:
    """Check a commit author's email and return it unchanged: one `@` with text on each side,
    3-254 characters, no spaces, `<`, `>` or control characters. Raises `PolicyError`."""

def pull_request_title(text: str) -> str:
    """Check a pull request's title and return it unchanged: one line of 1-256 characters, not
    blank, no control characters. Raises `PolicyError`."""

def pull_request_body(text: str) -> str:
    """Check a pull request's body and return it unchanged: at most 64 KiB, no NUL nor control
    characters other than newline, tab and carriage return. Raises `PolicyError`."""

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

def id_pattern(kind: _IdKind) -> str:
    """The shape of an id of `kind` as a regular expression (a schema's `pattern`): exactly what
    `check_id` accepts. Raises `PolicyError` (rule `id.kind`) for an unknown kind."""

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

# --- tags and idempotency keys -------------------------------------------------------------

WORKSPACE_TAGS: tuple[str, str, str, str]
"""The tags a driver writes when it creates a workspace, in this order: `managed-by`,
`workspace-id`, `workspace-root`, `created-at`. They never change."""
IDEMPOTENCY_TAG: str
"""`idempotency-key`: the tag under which the service records a create's idempotency key."""
MANAGED_TAGS: tuple[str, ...]
"""Every exact tag name the gateway manages: `WORKSPACE_TAGS` and `IDEMPOTENCY_TAG`."""
MANAGED_TAG_PREFIXES: tuple[str, ...]
"""Prefixes of the tags the gateway writes itself: the service's after git operations (`repo-`)
and a driver's own records (`mwc-`)."""
MAX_TAGS: int
"""Most tags a client may set on one workspace (32)."""
MAX_TICKET_SECONDS: int
"""The longest a ticket lives (3600 seconds)."""

def caller_tags(tags: dict[str, str]) -> dict[str, str]:
    """Check the tags a client asks to put on a workspace and return the same dict.

    At most `MAX_TAGS`; each key 1-63 ASCII letters, digits, `.`, `_` or `-`, starting with a
    letter or digit, and not managed (`MANAGED_TAGS`, `MANAGED_TAG_PREFIXES`); each value at
    most 256 characters, none of them control, format or separator characters other than the
    space (Python's `str.isprintable`). Raises `PolicyError` (rules `tag.*`); a value is never
    quoted in the message.
    """

def stored_tag(key: str, value: str, fixed: str | None = None) -> None:
    """Check one tag a driver is asked to store: the key has the tag-key shape, and a workspace
    tag (`WORKSPACE_TAGS`) keeps the value it already has (`fixed`; `None` while creating), and
    the key is not one of a driver's own records (`mwc-`, which only the driver writes).
    Raises `PolicyError` (rule `tag.managed` for a changed workspace tag or a driver record)."""

def idempotency_key(text: str) -> str:
    """Check an idempotency key (1-128 ASCII letters, digits, `.`, `_`, `:` or `-`) and return
    it unchanged. Raises `PolicyError` (rules `idempotency-key.*`)."""

def check_patch(
    text: str, format: Literal["unified", "apply_patch"] | None = None, root: str = "/workspace"
) -> Literal["unified", "apply_patch"]:
    """Parse a multi-file patch (a unified diff, or the `*** Begin Patch` envelope; detected
    when `format` is None) and check every path it names (and every move target) under `root`
    as `workspace_path` does, `/workspace/...` included; return the format's name. Nothing is
    read or written. Raises `PolicyError` (rules `patch.*`: `patch.malformed` naming the line,
    `patch.path`, `patch.binary`, `patch.unsupported`, `patch.empty`, `patch.too-large`,
    `patch.too-many-files`, `patch.format`)."""

MAX_PATCH_BYTES: int
"""The largest patch accepted, in bytes of UTF-8 (1 MiB)."""

MAX_PATCH_FILES: int
"""The most files one patch may change (100)."""

def snapshot_label(text: str) -> str:
    """Check a snapshot's label (at most 64 printable characters, spaces allowed) and return it
    unchanged. Raises `PolicyError` (rules `snapshot-label.*`)."""

MAX_IMAGE_PACKAGES: int
"""Most packages of one kind (apt or pip) a workspace request may add to its image (32)."""

def image_name(text: str) -> str:
    """Check a published image's name: `NAME` or `NAME:TAG` (a Modal object name; the tag 1-64
    letters, digits, `.`, `_` or `-`, not starting with `.` or `-`). Raises `PolicyError`
    (rules `image.name`, `image.tag`)."""

def image_id(text: str) -> str:
    """Check an image id: `im-` and 1-64 ASCII letters or digits. Raises `PolicyError`
    (rule `image.id`)."""

def image_packages(kind: str, items: list[str]) -> list[str]:
    """Check the `apt` or `pip` packages to add to an image and return them without duplicates
    (order kept). At most `MAX_IMAGE_PACKAGES`. apt: a Debian package name, optionally
    `=VERSION` (an exact Debian version); pip: a PEP 508 name, optionally `==VERSION` (a PEP 440
    public version). No options, paths, URLs, extras, markers or ranges. Raises `PolicyError`
    (rules `package.*`)."""

def mint_link(key: bytes, workspace_id: str, path: str, expires: int) -> str:
    """A download link's token naming `path` in `workspace_id` until `expires` (unix seconds),
    signed with HMAC-SHA256 under `key` (at least 16 bytes). Raises `PolicyError` (`link.*`)."""

def verify_link(key: bytes, token: str, now: int) -> tuple[str, str, int]:
    """`(workspace_id, path, expires)` of a link's token when `key` signed it (compared in
    constant time) and it has not expired at `now`. Raises `PolicyError`: `link.malformed`,
    `link.signature` (altered, or another key) or `link.expired`."""

def mint_ticket(
    key: bytes, purpose: str, workspace_id: str, object: str, now: int, seconds: int
) -> tuple[str, int]:
    """A ticket (an opaque, URL-safe string) for `purpose` (lowercase words joined by `-`) on
    `object` (an id or number: letters, digits, `_`, `-`) in `workspace_id`, with a random nonce,
    signed with HMAC-SHA256 under `key` (at least 16 bytes); valid `seconds` (1 to
    `MAX_TICKET_SECONDS`) from `now` (unix seconds). Returns it and its expiry. Raises
    `PolicyError` (`ticket.*`, `id.*`)."""

def verify_ticket(
    key: bytes,
    ticket: str,
    purpose: str,
    now: int,
    workspace_id: str | None = None,
    object: str | None = None,
) -> tuple[str, str, int]:
    """`(workspace_id, object, expires)` of a ticket when `key` signed it (compared in constant
    time) for `purpose`, and for `workspace_id` and `object` where given, and it is live at
    `now`. Raises `PolicyError`: `ticket.malformed` (length and shape, checked first),
    `ticket.signature`, `ticket.purpose`, `ticket.workspace`, `ticket.object`, `ticket.expired`,
    `ticket.lifetime`."""

def volume_mount(text: str) -> str:
    """Check where a volume may be mounted (absolute, no `..`, not at, under or above what a
    sandbox is built from, nor over the workspace, its home or /tmp) and return it canonical.
    Raises `PolicyError` (rules `mount.*` and `path.*`)."""

# --- resources ------------------------------------------------------------------------------

MIN_CPU_CORES: float
"""Modal's smallest CPU request, in physical cores (0.125)."""
MAX_CPU_CORES: float
"""The most cores a workspace may request or be limited to (64)."""
MIN_MEMORY_MIB: int
"""Modal's smallest memory request, in MiB (128)."""
MAX_MEMORY_MIB: int
"""The most memory a workspace may request or be limited to, in MiB (262 144)."""
MAX_REGIONS: int
"""The most regions one workspace may name (8)."""
MAX_ALLOWLIST_ENTRIES: int
"""The most entries of one outbound allowlist (16): the record of a workspace's resources is
one Modal tag of at most 1024 characters."""

def cpu_cores(value: float) -> float:
    """Check a CPU request in cores (`MIN_CPU_CORES` to `MAX_CPU_CORES`, whole thousandths)
    and return it canonical. Raises `PolicyError` (rules `cpu.range`, `cpu.precision`)."""

def cpu_limit(request: float | None, limit: float) -> float:
    """Check a hard CPU limit in cores: a CPU value not below `request` (`None`: no request
    given). Raises `PolicyError` (also rule `cpu.limit-below-request`)."""

def memory_mib(value: int) -> int:
    """Check a memory request in MiB (`MIN_MEMORY_MIB` to `MAX_MEMORY_MIB`) and return it.
    Raises `PolicyError` (rule `memory.range`)."""

def memory_limit_mib(request: int | None, limit: int) -> int:
    """Check a hard memory limit in MiB: a memory value not below `request` (`None`: no request
    given). Raises `PolicyError` (also rule `memory.limit-below-request`)."""

def region(text: str) -> str:
    """Check one region name in the forms Modal documents (`us`, `us-east`, `us-east-1`,
    `us-central1`: lowercase letters and digits in up to five `-`-separated parts, starting
    with a letter, at most 32 characters) and return it lowercased. Raises `PolicyError`
    (rule `region.shape`)."""

def outbound_cidr(text: str) -> str:
    """Check one outbound CIDR (`ADDRESS/PREFIX` or one address) and return it canonical
    (`ADDRESS/PREFIX`, IPv6 compressed). Refused: host bits set, leading zeros, zone ids, and
    any overlap with a private, loopback, link-local (metadata), shared, multicast, reserved or
    IPv4-embedding range. Raises `PolicyError` (rules `cidr.*`)."""

def outbound_domain(text: str) -> str:
    """Check one outbound domain (`name.tld` or `*.name.tld`, ASCII, at most 253 characters)
    and return it lowercase without a trailing dot. Refused: `*` alone, addresses, and names
    under `.localhost`, `.local`, `.internal` or `.arpa`. Raises `PolicyError` (rules
    `domain.*`)."""

def regions(names: Sequence[str]) -> list[str]:
    """Check the regions a workspace may run in (1 to `MAX_REGIONS` names in the forms Modal
    documents: `us`, `us-east`, `us-east-1`, `us-central1`) and return them lowercased without
    repeats. Raises `PolicyError` (rules `region.*`, `resources.too-many`) naming the entry."""

def outbound_allowlists(
    block_network: bool,
    cidrs: Sequence[str] | None = None,
    domains: Sequence[str] | None = None,
) -> tuple[list[str] | None, list[str] | None]:
    """Check a workspace's outbound CIDR and domain allowlists (`None`: no such list; an empty
    list allows nothing) and return them canonical without repeats: CIDRs as `ADDRESS/PREFIX`
    with no host bits, none overlapping a private, loopback, link-local, shared, multicast or
    IPv4-embedding range; domains lowercase, `name.tld` or `*.name.tld`, none under `.local`,
    `.internal`, `.localhost` or `.arpa`. At most `MAX_ALLOWLIST_ENTRIES` each; refused with
    `block_network`. Raises `PolicyError` (rules `cidr.*`, `domain.*`, `network.*`,
    `resources.too-many`) naming the field and entry."""

MIN_PREVIEW_PORT: int
"""The lowest TCP port a workspace may declare for previews (1024: lower ones need root to
listen on)."""
MAX_PREVIEW_PORTS: int
"""The most ports one workspace may declare for previews (8)."""

def preview_port(port: int) -> int:
    """Check one preview port: a whole number from `MIN_PREVIEW_PORT` to 65535 (an int of any
    size is refused, not overflowed). Raises `PolicyError` (rule `port.range`)."""

def preview_ports(ports: Sequence[int]) -> list[int]:
    """Check the ports a workspace declares for previews (at most `MAX_PREVIEW_PORTS`, each
    through `preview_port`) and return them without repeats, in their order. Raises
    `PolicyError` (rules `port.range` naming the entry, `port.too-many`)."""

def preview_host(text: str) -> str:
    """Check the preview zone an operator names (`MODAL_WORKSPACE_PREVIEW_HOST`): a DNS name of
    one or more labels whose every subdomain reaches the gateway; return it canonical
    (lowercase, no trailing dot). Raises `PolicyError` (rules `preview-host.shape`,
    `preview-host.address`)."""

def preview_origin_host(host: str, workspace_id: str, port: int) -> str:
    """The host name a preview of `port` of `workspace_id` is served on under the zone `host`:
    `p-<the id's 32 hex digits>-<port>.<zone>`. Raises `PolicyError`."""

def preview_host_target(host: str, zone: str) -> tuple[str, int] | None:
    """What a request's `Host` header names under the preview zone `zone` (canonical): None for
    a name outside it (the gateway's own pages), `(workspace_id, port)` for a preview's name.
    Raises `PolicyError` (rule `preview-host.label`) for any other name under the zone."""

GPU_TYPES: tuple[tuple[str, int], ...]
"""Modal's GPU types a workspace may ask for, as Modal writes them, each with the most one
workspace may have (`("T4", 8)`, …, `("A10", 4)`, …)."""
MAX_GPU_COUNT: int
"""The most GPUs of any type one workspace may ask for (8)."""

def gpu(text: str) -> str:
    """Check a GPU request, `TYPE` or `TYPE:N` (a type of `GPU_TYPES` in any case, or `A10G`
    for the A10; N from 1 to the type's bound, digits only), and return it as Modal writes it,
    without a count of 1 (`h100:1` -> `H100`). Raises `PolicyError` (rules `gpu.type`,
    `gpu.count`)."""

# --- allowlist settings ---------------------------------------------------------------------

def gpu_allowlist(text: str) -> list[str]:
    """Parse the GPU allowlist setting: comma-separated `TYPE` (any count up to Modal's bound)
    or `TYPE:N` (at most N) entries, e.g. `T4,H100:2`; returns them canonical (`TYPE:N` kept
    even for N = 1). Empty entries are skipped; an empty setting allows no GPU. Raises
    `PolicyError` for an entry `gpu` refuses or a type listed twice (`allowlist.duplicate`)."""

def allowed_gpu(request: str, allowlist: Sequence[str], setting: str) -> str:
    """Check a GPU request (as `gpu`) against `allowlist` (entries as `gpu_allowlist` returns
    them), the value of the setting `setting`, and return it canonical. Deny by default. The
    message lists what is allowed and names `setting` (rules `allowlist.denied` for a type not
    listed or an empty allowlist, `allowlist.count` for more than an entry allows)."""

def secret_allowlist(text: str) -> dict[str, tuple[str, ...]]:
    """Parse the secret allowlist setting: comma-separated `NAME[:VAR[:VAR...]]` entries, e.g.
    `openai:OPENAI_API_KEY,github`. Returns `{name: variables}` in the setting's order; the
    variables are empty when the entry lists none. Empty entries are skipped.

    Raises `PolicyError` for a name that is not a Modal object name, a variable that is not an
    environment variable name, or a name listed twice (`allowlist.duplicate`).
    """

def name_allowlist(text: str) -> list[str]:
    """Parse a comma-separated allowlist of Modal object names (volumes). Raises `PolicyError`
    for an invalid or repeated name, or an entry with `:` (`allowlist.keys`)."""

def function_allowlist(text: str) -> list[str]:
    """Parse `MODAL_WORKSPACE_ALLOWED_FUNCTIONS`: comma-separated `APP/FUNCTION` entries, each
    a valid app and function name listed once. Raises `PolicyError`."""

def allowed_function(app: str, function: str, allowlist: Sequence[str], setting: str) -> str:
    """Check both names, then that `app/function` is listed exactly in `allowlist`, and return
    it. Deny by default; the message names `setting`, never the allowed names."""

def modal_app_name(text: str) -> str:
    """Check a deployed app's name (1-64 of `[A-Za-z0-9._-]`, not an app id) and return it.
    Raises `PolicyError`."""

def modal_function_name(text: str) -> str:
    """Check a function's name inside a deployed app (1-64 of `[A-Za-z0-9_-]`; no `.`: class
    methods are not offered) and return it. Raises `PolicyError`."""

def function_call_id(text: str) -> str:
    """Check a Modal function-call id (`fc-` and 20-32 letters or digits) and return it.
    Raises `PolicyError`."""

def function_call_id_pattern() -> str:
    """The shape of a function-call id (a schema's `pattern`): exactly what `function_call_id`
    accepts."""

def modal_app_name_pattern() -> str:
    """The shape of a deployed app's name (a schema's `pattern`); the rule also refuses a name
    shaped like an app id."""

def template_name(text: str) -> str:
    """Check a template's name (1-48 of `[a-z0-9._-]`, starting with a letter or digit) and
    return it unchanged. Raises `PolicyError` (rules `template-name.*`)."""

def template_name_pattern() -> str:
    """The shape of a template's name (a schema's `pattern`): exactly what `template_name`
    accepts."""

# --- metric lines ---------------------------------------------------------------------------

METRIC_PREFIX: str
"""The word that starts a metric line: `::metric`."""

MAX_METRIC_LINE_BYTES: int
"""A longer line is not a metric line (4096 bytes, without its newline)."""

MAX_METRIC_NAMES: int
"""The most names a line may give, and a run keeps (32)."""

def metric_line(line: str) -> dict[str, float] | None:
    """The metrics one output line (without its newline) reports: `::metric loss=0.31 step=120`
    or `::metric {"loss": 0.31, "step": 120}`. `{}` for a line that is not a metric line, None
    for one that says `::metric` and does not parse (a name outside
    `[A-Za-z_][A-Za-z0-9_.:/-]{0,63}`, a value that is not a finite number, more than
    `MAX_METRIC_NAMES` names). A name given twice keeps its last value."""

@final
class MetricLines:
    """One output stream (stdout or stderr, never both) read for metric lines, as the agent
    reads it: bytes cut anywhere joined into lines, a line longer than `MAX_METRIC_LINE_BYTES`
    dropped whole (however many reads it spans)."""

    def __new__(cls) -> Self: ...
    def feed(self, data: bytes) -> list[dict[str, float] | None]:
        """What each metric line that `data` completes says (as `metric_line`; never `{}`)."""
    def finish(self) -> list[dict[str, float] | None]:
        """The stream ended: its last line too, if it had no newline."""

# --- the event ring -------------------------------------------------------------------------

FINAL_STATES: frozenset[str]
"""The states a stream ends in (an exec's `finished`, `cancelled`, `failed`, `timed_out`, `lost`;
a watch's also `root_removed`)."""

@final
class StreamKind:
    """What kind of event stream an id names; ask it instead of looking at the id's prefix."""

    EXEC: StreamKind
    WATCH: StreamKind
    TASK: StreamKind
    METRICS: StreamKind
    @staticmethod
    def of(stream_id: str) -> StreamKind:
        """The kind of `stream_id`. Raises `PolicyError` (rule `stream.id`) unless it is an exec
        id (`ex-…`), a watch id (`fw-…`), a task id (`tk-…`) or a metrics stream id
        (`mt-…`)."""
    @staticmethod
    def id_pattern() -> str:
        """The shape of every stream id (a schema's `pattern`): what `of` accepts."""
    @property
    def value(self) -> Literal["exec", "watch", "task", "metrics"]: ...
    @property
    def has_log(self) -> bool:
        """The agent keeps the stream's events on disk (an exec's log); a watch, a task or a
        metrics stream has only its ring."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Page:
    """A page of events read from an `EventRing` after a cursor."""

    @property
    def events(self) -> list[dict[str, Any]]:
        """Events with `seq > cursor` (or from `first_seq` when the cursor expired), oldest
        first, as JSON-ready dicts: `seq`, `timestamp`, `type`, then `data` (text) or
        `data_b64` (bytes that are not UTF-8) and any fields. A coalesced event also has
        `seq_start`, the first seq it covers."""
    @property
    def next_cursor(self) -> int:
        """The last seq returned, or the cursor when none was: pass it to the next read."""
    @property
    def has_more(self) -> bool:
        """More events existed after this page when it was read."""
    @property
    def first_seq(self) -> int:
        """The oldest seq the ring still keeps (`last seq + 1` while it is empty)."""
    @property
    def cursor_expired(self) -> bool:
        """Events after the cursor were evicted; the page continues from `first_seq`."""
    @property
    def dropped_events(self) -> int:
        """How many events between the cursor and `first_seq` were lost to this reader."""
    @property
    def dropped_bytes(self) -> int:
        """The output bytes those events carried (their `data` as UTF-8, their `data_b64`
        decoded), so that delivered + dropped = what the command wrote: exact unless the reader
        is more than 65 536 evicted events behind, where it is a lower bound."""
    @property
    def closed(self) -> bool:
        """The producer has finished: no event will follow the ring's last one."""
    @property
    def state(self) -> str | None:
        """The stream's state as of this page's last event (as of the cursor when it is empty),
        folded by the core from the stream's `status` and `exit` events: an exec is `starting`
        until its `running` status, a watch `watching` until its final status. `None` only for
        a ring made without a `kind` whose events have not said."""
    @property
    def returncode(self) -> int | None:
        """The exec's return code from its `exit` event (minus the signal number); `None`
        before it, for a `lost` exec and for a watch."""
    @property
    def done(self) -> bool:
        """The stream is closed and nothing is left after this page: its final event has been
        delivered, in this page or an earlier one. A client loops until it is true."""
    def to_json(self) -> str:
        """The page as the agent sends it (`events`, `next_cursor`, `has_more`, `done`,
        `state`, `returncode`, `first_seq`, `cursor_expired`, `dropped_events`,
        `dropped_bytes`, `closed`), never longer than the read's (raised) `max_bytes`."""
    def to_client_json(self) -> str:
        """The page as clients get it: `to_json()` without `closed`, the fields of
        `results.EventPage` in its order."""
    def events_json(self) -> str:
        """The events alone, as the JSON array `to_json()` holds."""
    def __len__(self) -> int: ...

# The smallest page budget: a smaller max_bytes would not hold the largest event.
MIN_PAGE_BYTES: int

@disjoint_base
class EventRing:
    """A stream's events numbered `seq = 1, 2, 3, …`, bounded in encoded bytes (and optionally
    in count); the oldest are evicted first, never the newest. Share it between threads and
    tasks freely.

    Raises `PolicyError` (a `ValueError`) when `max_bytes` or `max_events` is not positive.
    """

    def __new__(
        cls, max_bytes: int, max_events: int | None = None, kind: StreamKind | None = None
    ) -> Self: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def max_events(self) -> int | None: ...
    @property
    def kind(self) -> StreamKind | None:
        """The stream's kind, which decides its state before any event says it."""
    @property
    def closed(self) -> bool:
        """`close()` was called."""
    @property
    def last_seq(self) -> int:
        """The newest seq appended (0 before the first event)."""
    def append(self, type: str, data: bytes | None = None, **fields: Any) -> int:
        """Appends an event and returns the last seq assigned so far.

        `type` is one of status, stdout, stderr, error, exit, fs, metrics, progress, reported.
        Output (`stdout`, `stderr`) is decoded incrementally per stream: a character cut by the
        end of `data` is held back (at most 3 bytes) until the next append of that stream, so an
        append may add no event. Data larger than 16 KiB becomes consecutive events. Other
        types take `fields` (JSON-like values) merged at the top level of the event; the keys
        seq, seq_start, timestamp, type, data and data_b64 are refused, as are fields on
        output events. An `exit` event first flushes what the output streams held back.
        Raises `PolicyError` for an unknown type, bad fields, or a closed ring.
        """
    def append_many(self, type: str, chunks: list[bytes]) -> int:
        """Appends each chunk as `append(type, chunk)` would, under one lock with one wake-up."""
    def close(self) -> None:
        """Ends the stream: flushes held-back partial characters (as `data_b64`), wakes every
        waiter, and refuses later appends. Closing twice does nothing."""
    def read(
        self, cursor: int, max_events: int = 100, max_bytes: int = 65536, coalesce: bool = False
    ) -> Page:
        """Reads the events after `cursor` (0 = from the start).

        At most `max_events` events (lowered to 10 000) and `max_bytes` of page JSON; budgets
        below 32 KiB are raised to 32 KiB so that any event fits and every read makes progress.
        With `coalesce`, adjacent text events of one output stream merge into one (`seq` = the
        last, `seq_start` = the first) and `max_events` counts merged events. Raises
        `PolicyError` if the cursor is past the last event or `max_events` < 1.
        """
    def wait(self, cursor: int, timeout: float) -> bool:
        """Blocks (without the GIL) until an event after `cursor` exists or the ring is closed
        (True), or `timeout` seconds pass (False). `timeout` must be from 0 to 86 400."""
    def _ready(self, cursor: int, timeout: float) -> bool:
        """Whether an event after `cursor` exists or the ring is closed, with both arguments
        checked as `wait` checks them (the first step of `wait_async`, in `ring.py`)."""
    def _watch(self, cursor: int, bell: _LoopBell, token: int) -> _RingWatch | None:
        """Rings `bell` with `token` once `_ready(cursor)` would be true, from the appending or
        closing thread and without the GIL; None (and nothing registered) if it already is."""

@final
class _LoopBell:
    """An event loop's doorbell: a pipe the loop watches, readable once a watch has rung it."""

    def __new__(cls) -> Self: ...
    def fileno(self) -> int:
        """The pipe's read end, open while this bell or a watch that rings it lives."""
    def take(self) -> list[int]:
        """The tokens rung since the last call; read the pipe's byte first."""

@final
class _RingWatch:
    """A wait registered by `EventRing._watch`."""

    def cancel(self) -> None:
        """Takes the wait back (a ring already under way on another thread may still land)."""

# --- agent --------------------------------------------------------------------------------------

AGENT_OPS: tuple[str, ...]
"""The name of every op the agent serves (docs/protocol.md), in the protocol's order; the
channel's own `subscribe` and `unsubscribe` are not among them."""

REPEATABLE_AGENT_OPS: frozenset[str]
"""The ops that may be sent again after a lost channel without doing anything twice (a start
with the gateway's `exec_id` answers the first start); `exec.input`, `exec.resize`,
`file.edit`, `file.remove`, `watch.start` and `task.progress` are not."""

CHANNEL_KEEPALIVE_SECONDS: int
"""How often a gateway sends a frame on an idle channel by default (the agent closes one silent
for three times as long)."""

def agent_main(argv: list[str]) -> int:
    """Run the workspace agent's command line (`mwc-agent`) and return its exit code.

    `argv` excludes the program name: `["daemon", "--root", DIR, "--state-dir", DIR, "--socket",
    PATH]` or `["connect", "--socket", PATH]` or `["--help"]`. The GIL is released for the whole
    run (the daemon runs until SIGTERM or SIGINT); the agent builds its own tokio runtime.
    """

# --- the host's operations on workspace trees ----------------------------------------------

class TreeError(RuntimeError):
    """A host-side tree operation stopped. `kind` is `limit` (a bound of the caller's),
    `no_space` (the disk is full or under the free-space floor), `cancelled` or `io`; the
    message names entries by the display root it was given, never a host path."""

    kind: Literal["limit", "no_space", "cancelled", "io"]

@final
class TreeProgress:
    """How far a running `copy_tree` is, readable from another thread, and a way to stop it."""

    def __new__(cls) -> Self: ...
    @property
    def bytes(self) -> int:
        """File bytes written so far."""
    @property
    def entries(self) -> int:
        """Entries met so far."""
    def cancel(self) -> None:
        """Stops the copy at its next entry or chunk (it raises `TreeError`, kind `cancelled`)."""

def copy_tree(
    source: str,
    target: str,
    *,
    display: str,
    max_bytes: int,
    max_entries: int,
    min_free_bytes: int = 0,
    owner: int | None = None,
    progress: TreeProgress | None = None,
) -> dict[str, int]:
    """Copy the contents of the directory `source` into the existing directory `target`,
    walking both by directory fds that never follow a link (`O_NOFOLLOW`, one name at a time,
    never across a mount): symlinks are copied as symlinks, FIFOs, sockets and devices left out,
    a file copied up to the size it had when opened (holes kept), setuid and setgid dropped,
    owners kept as root (or all `owner`'s). Raises `TreeError` past `max_bytes` of file data,
    `max_entries`, or when the target's file system has less than `min_free_bytes` free.
    Returns counts: `bytes`, `files`, `dirs`, `symlinks`, `hardlinks`, `skipped`, `changed`.
    The GIL is released while it runs."""

def tree_usage(root: str, *, display: str, max_entries: int) -> dict[str, Any]:
    """What a copy of `root` would write (`bytes`: the regular files' allocated data),
    `entries`, `truncated` when the walk stopped at `max_entries`, and `too_deep`: the first
    directory deeper than a walk descends (256 levels), or None."""

def remove_tree(path: str, *, display: str) -> None:
    """Remove `path` and everything under it through directory fds: a symlink is removed as
    a link, directories a command locked are opened up, nothing outside is touched; nothing
    there is no failure. Raises `TreeError`."""

def empty_dir(path: str, *, display: str) -> None:
    """Remove everything in the directory `path`, which stays (it may be a mount point)."""

# --- the agent channel (gateway side) -------------------------------------------------------

_Response = tuple[int, bool, str, bytes]

@final
class AgentChannel:
    """The gateway's end of one agent channel, sans-IO (docs/protocol.md): feed it the bytes a
    transport read, write what `take_outgoing` returns. Sends `Hello` first and checks the
    agent's. Events of subscribed streams go into a cache: one mirror ring per stream that keeps
    the agent's seqs, bounded by `stream_bytes` per stream and `max_streams` streams (the least
    recently used stream that no reader has pinned is dropped and unsubscribed). Credit is
    returned to the agent as readers consume pages: `read_cached` at a cursor consumes every
    page up to it, and the credit it frees (in half-window batches) is queued for
    `take_outgoing`; so the agent pushes no further than one window ahead of the most advanced
    reader, and a stream nobody reads waits in the agent's log. The window is `credit`, but
    never more than `stream_bytes` less one pushed page (64 KiB): the agent may send one page
    past its credit, and that page must not evict events a reader has not read yet. Safe to
    share between threads (one lock inside).

    Raises `PolicyError` when a bound is not positive.
    """

    def __new__(
        cls,
        *,
        stream_bytes: int = 1048576,
        max_streams: int = 64,
        credit: int = 1048576,
        key: str | None = None,
        keepalive_seconds: int = 10,
    ) -> Self:
        """`key`: the workspace's channel key, sent in every Hello (an agent started with one
        refuses a peer without it). `keepalive_seconds` (1 to 300): the Hello promises a frame at
        least that often, and the agent closes a connection silent for three times as long."""
    @property
    def keepalive_seconds(self) -> int:
        """How often this channel promised the agent a frame."""
    def keepalive(self) -> bool:
        """Queues a keepalive frame if the agent's Hello says it takes them (True when one was
        queued): call it every `keepalive_seconds`, then send `take_outgoing()`."""
    def feed(
        self, data: bytes | bytearray | memoryview
    ) -> tuple[str | None, list[_Response], list[str]]:
        """Handles bytes read from the transport: `bytes`, or a buffer of bytes such as a view
        of a buffer the transport reuses (copied before the call returns, so the transport may
        read into it again). Returns `(hello, responses, woken)`:
        the agent's Hello header as JSON when it arrived in this feed; completed requests as
        `(id, ok, body_json, payload)` where `body_json` is the result object or the error
        object (`{"code", "message"}`); and the streams whose cache changed (new events, the
        end of the stream, a gap, or a refused subscription). When the channel fails (protocol
        mismatch, a malformed frame, the agent's refusal) the failure comes as a response with
        id 0 and `ok` false, once; later feeds do nothing."""
    def take_outgoing(self) -> bytes:
        """The bytes to write to the transport now, in order (possibly empty)."""
    def request(self, op: str, args: dict[str, Any] | None = None, payload: bytes = b"") -> int:
        """Queues a request and returns its id; its response comes back from `feed`.

        Raises `ChannelRefusal` (`code` "invalid_argument" or "limit") for a bad op, args that
        are not JSON-like, or a request larger than a frame; `ChannelFailure` (`code`
        "unavailable") once the channel has failed."""
    def cancel(self, id: int) -> None:
        """Forgets a request nobody waits for any more: its late response is dropped."""
    def subscribe(self, stream: str, cursor: int) -> tuple[int | None, list[str]]:
        """Starts caching an exec (`ex-…`) or watch (`fw-…`) stream after `cursor` and queues
        its subscription. Returns the request id to wait on (None when the stream is already
        cached) and the streams dropped from the cache to make room (only streams not pinned).

        Raises `ChannelRefusal` with `code` "limit" when every cached stream is pinned: read the
        exec's log (`exec.read`) instead. A watch has no log, so it is cached past the bound
        then (later subscriptions trim the excess)."""
    def pin(self, stream: str) -> None:
        """Counts a reader of `stream` (cached or not): while it has readers, it is never
        dropped to make room for another."""
    def unpin(self, stream: str) -> None:
        """Counts one reader of `stream` fewer (ignored when it has none)."""
    def read_cached(
        self, stream: str, cursor: int, max_events: int = 100, max_bytes: int = 65536
    ) -> tuple[Literal["page", "missing", "expired", "ahead", "ahead_closed"], Page | None]:
        """Reads a stream from the cache, without waiting (and counts the pages up to `cursor`
        as consumed: write `take_outgoing` afterwards, it may hold credit):
        `("page", page)` (possibly empty); `("missing", None)`: not cached, subscribe;
        `("expired", page)`: the cursor is older than the cache — read the agent's log (the
        page is the cache's own, `cursor_expired`); `("ahead", None)`: the cursor is past the
        cache's last event and more may come; `("ahead_closed", None)`: past the end."""
    def restart(self) -> None:
        """Begins a new session on a new transport, keeping the cache: queues Hello and a
        subscription of every open stream from the last seq it holds; pending requests are
        forgotten (their answers were lost with the old transport)."""
    @property
    def agent_hello(self) -> str | None:
        """The agent's Hello header (JSON) once accepted."""
    @property
    def failure(self) -> tuple[str, str] | None:
        """`(code, message)` once the channel has failed."""
    @property
    def cache_streams(self) -> int:
        """Streams cached now."""
    @property
    def cache_bytes(self) -> int:
        """Encoded event bytes held by the cache now."""
    @property
    def stream_bytes(self) -> int: ...
    @property
    def max_streams(self) -> int: ...
    @property
    def credit(self) -> int: ...

def parse_page(data: bytes) -> Page:
    """A page the agent sent as a payload (`exec.read`), as a `Page`. Raises `ChannelRefusal`
    (`code` "internal") when it is not a page of single, canonically encoded events."""
