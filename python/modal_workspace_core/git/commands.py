"""The git command lines the repo operations run, and the parser of `git status` output.

A clone or fetch is two steps of one exec: the network step (as the agent, with a fixed
environment and configuration, the only git that may hold the token) fetches the canonical URL
into a bare mirror in the agent's directory; the workspace step clones or fetches from that
mirror with no token. Argv is built only from policy-checked values, and every script here is a
constant that takes those values as positional parameters: no client text is ever spliced into
shell source.
"""

from __future__ import annotations

import hashlib
import posixpath
import re

from ..policy import WORKSPACE_ROOT

__all__ = [
    "checkout_argv",
    "clone_from_mirror_argv",
    "diff_argv",
    "fetch_from_mirror_argv",
    "head_argv",
    "mirror_argv",
    "mirror_env",
    "mirror_head_argv",
    "mirror_path",
    "parse_status",
    "remote_head",
    "remote_refs_argv",
    "repo_dir",
    "report_head",
    "status_argv",
]

_COMMIT = re.compile(r"[0-9a-fA-F]{7,40}")

# The configuration of the network step, the only git that ever holds the token: nothing is
# read from a system or global file (see `mirror_env`), no hook, fsmonitor or credential helper
# runs, only https (and http for a plain-http base) is spoken, redirects are not followed, and
# the askpass is asked for the host alone. No checkout happens here, so no LFS filter runs.
_NETWORK_CONFIG = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "credential.helper=",
    "credential.useHttpPath=false",
    "protocol.allow=never",
    "protocol.https.allow=always",
    "http.followRedirects=false",
    "transfer.credentialsInUrl=die",
    # Over the repository's own configuration (the mirror's), which must never turn it off.
    "http.sslVerify=true",
)

# $1 clone|fetch, $2 url, $3 mirror, $4 branch or tag ("" for none), $5 commit ("" for none),
# $6 depth ("" for full); the rest: git's -c options. A clone starts the mirror afresh; a fetch
# updates it (creating it when the repository was not cloned through one).
_MIRROR = """set -e
mode=$1 url=$2 mirror=$3 ref=$4 commit=$5 depth=$6
shift 6
if [ "$mode" = clone ] || [ ! -d "$mirror" ]; then
  rm -rf -- "$mirror"
  mkdir -p -- "${mirror%/*}"
  if [ "$mode" = clone ]; then
    git "$@" clone --progress --bare ${depth:+--depth=$depth --no-single-branch} \
      ${ref:+"--branch=$ref"} -- "$url" "$mirror"
  else
    git "$@" init --quiet --bare "$mirror"
  fi
fi
if [ "$mode" = fetch ]; then
  git "$@" --git-dir="$mirror" fetch --progress --prune ${depth:+--depth=$depth} -- "$url" \
    '+refs/heads/*:refs/heads/*' '+refs/tags/*:refs/tags/*'
fi
if [ -n "$commit" ]; then
  git "$@" --git-dir="$mirror" fetch --progress ${depth:+--depth=$depth} -- "$url" \
    "+$commit:refs/mwc/commit"
fi
"""

# $1 mirror URL (file://), $2 dest, $3 branch or tag, $4 commit, $5 depth, $6 origin URL,
# $7 mirror path. No token and no network: the clone reads the agent's mirror, and `origin`
# becomes the canonical URL. LFS objects are not fetched (GIT_LFS_SKIP_SMUDGE).
_CLONE_FROM_MIRROR = """set -e
src=$1 dest=$2 ref=$3 commit=$4 depth=$5 origin=$6 mirror=$7
# The mirror belongs to the agent's git uid: upload-pack is told it is safe. Git clears `-c`
# options (GIT_CONFIG_PARAMETERS) for a local transport's upload-pack, hence its own command.
up="git -c safe.directory=$mirror upload-pack"
if [ -n "$commit" ]; then
  git -c safe.directory="$mirror" clone --progress --no-checkout ${depth:+--depth=$depth} \
    --upload-pack="$up" -- "$src" "$dest"
  git -c safe.directory="$mirror" -C "$dest" fetch --progress ${depth:+--depth=$depth} \
    --upload-pack="$up" -- "$src" refs/mwc/commit
  git -C "$dest" checkout --progress --detach FETCH_HEAD
else
  git -c safe.directory="$mirror" clone --progress ${depth:+--depth=$depth} \
    --upload-pack="$up" ${ref:+"--branch=$ref"} -- "$src" "$dest"
fi
git -C "$dest" remote set-url origin "$origin"
"""

# $1 mirror URL, $2 dest, $3 branch or tag, $4 commit, $5 depth, $6 mirror path. The named ref
# (if any) becomes FETCH_HEAD; every branch updates `origin/*`, as a fetch from origin would.
_FETCH_FROM_MIRROR = """set -e
src=$1 dest=$2 ref=$3 commit=$4 depth=$5 mirror=$6
set --
if [ -n "$commit" ]; then set -- refs/mwc/commit; elif [ -n "$ref" ]; then set -- "$ref"; fi
up="git -c safe.directory=$mirror upload-pack"
git -c safe.directory="$mirror" -C "$dest" fetch --progress ${depth:+--depth=$depth} \
  --upload-pack="$up" -- "$src" "$@" '+refs/heads/*:refs/remotes/origin/*' \
  '+refs/tags/*:refs/tags/*'
"""

# $1 repo dir, $2 "stat" or "patch", $3 "cached" or "worktree". For the working tree, untracked
# files are shown as new by marking them intent-to-add in a throwaway copy of the index, so the
# repository's real index is never touched. No list of files passes through a pipe, and the git
# directory is the line of rev-parse's output that names one: another process of the workspace
# may write lines into any pipe of this step.
_DIFF = """set -e
cd -- "$1"
if [ "$2" = stat ]; then fmt=--stat; else fmt=--patch; fi
if [ "$3" = cached ]; then exec git diff --cached --no-color --no-ext-diff "$fmt"; fi
gitdir=
while IFS= read -r line; do
  if [ -z "$gitdir" ] && [ -f "$line/HEAD" ]; then gitdir=$line; fi
done <<GITDIR
$(git rev-parse --absolute-git-dir)
GITDIR
[ -n "$gitdir" ] || { echo "not a git repository: $1" >&2; exit 128; }
tmp="$gitdir/mwc-diff-index.$$"
trap 'rm -f "$tmp"' EXIT
if [ -f "$gitdir/index" ]; then cp "$gitdir/index" "$tmp"; fi
GIT_INDEX_FILE=$tmp git add --intent-to-add --ignore-removal -- .
GIT_INDEX_FILE=$tmp git diff --no-color --no-ext-diff "$fmt"
"""


def repo_dir(path: str) -> str:
    """A repository's directory as a workspace step's git names it: relative to the root the
    step runs in (`./...`, so a name that starts with "-" never looks like an option). `path`
    is a validated `/workspace/...` path, or one already relative to the root."""
    if path == WORKSPACE_ROOT or path.startswith(WORKSPACE_ROOT + "/"):
        path = path[len(WORKSPACE_ROOT) + 1 :]
    return "." if path in ("", ".") else f"./{path}"


def is_commit(ref: str) -> bool:
    return bool(_COMMIT.fullmatch(ref))


def base_origin(base: str) -> str:
    """`scheme://host[:port]` of a canonical base URL: what git's prompts name."""
    scheme, _, rest = base.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


def mirror_path(agent_dir: str, destination: str) -> str:
    """The agent's bare mirror for the repository at `destination` (an absolute path)."""
    key = hashlib.sha256(destination.encode()).hexdigest()[:32]
    return posixpath.join(agent_dir, "git", f"{key}.git")


def _split_ref(ref: str | None) -> tuple[str, str]:
    if ref is None:
        return "", ""
    return ("", ref) if is_commit(ref) else (ref, "")


def mirror_argv(
    mode: str, url: str, mirror: str, ref: str | None, depth: int | None, base: str
) -> list[str]:
    """The network step (an agent-identity step): `url` into the agent's mirror."""
    branch, commit = _split_ref(ref)
    return [
        "sh",
        "-c",
        _MIRROR,
        "sh",
        mode,
        url,
        mirror,
        branch,
        commit,
        str(depth or ""),
        *_network_options(base),
    ]


def _network_options(base: str) -> list[str]:
    """The network step's configuration as git's `-c` options."""
    config = list(_NETWORK_CONFIG)
    if base.startswith("http://"):
        config.append("protocol.http.allow=always")  # a local or test server only
    return [part for item in config for part in ("-c", item)]


def mirror_env(askpass: str | None) -> dict[str, str]:
    """The network step's whole environment beyond the agent's fixed base: no configuration
    file, no prompt, and the askpass when a token is given (the agent answers it for the step's
    credential alone; the token itself is in no environment)."""
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_LFS_SKIP_SMUDGE": "1",
    }
    if askpass is not None:
        env["GIT_ASKPASS"] = askpass
    return env


def clone_from_mirror_argv(
    mirror: str, dest: str, ref: str | None, depth: int | None, origin_url: str
) -> list[str]:
    """The workspace step of a clone: from the mirror, no token, `origin` set canonical."""
    branch, commit = _split_ref(ref)
    src = f"file://{mirror}"
    depth_text = str(depth or "")
    dest = repo_dir(dest)
    return [
        "sh",
        "-c",
        _CLONE_FROM_MIRROR,
        "sh",
        src,
        dest,
        branch,
        commit,
        depth_text,
        origin_url,
        mirror,
    ]


def fetch_from_mirror_argv(mirror: str, dest: str, ref: str | None, depth: int | None) -> list[str]:
    """The workspace step of a fetch: from the mirror into `origin/*` (and FETCH_HEAD)."""
    branch, commit = _split_ref(ref)
    src = f"file://{mirror}"
    return [
        "sh",
        "-c",
        _FETCH_FROM_MIRROR,
        "sh",
        src,
        repo_dir(dest),
        branch,
        commit,
        str(depth or ""),
        mirror,
    ]


# A step that reports on the exec's report channel (descriptor 3, which no process of the
# workspace holds) refuses to run without it: its output is no fact the gateway may decide on.
_NEEDS_REPORT = """[ "${MWC_REPORT_FD-}" = 3 ] || {
  echo "this workspace's agent cannot report: create the workspace again" >&2
  exit 1
}
"""

# $1 mirror, $2 branch or tag ("" for the default branch), $3 commit (""). Reports the commit
# the workspace step cloned from the mirror: the commit asked for, else the branch (as `git
# clone --branch` prefers it), else the tag, else the mirror's HEAD (the remote's default).
_MIRROR_HEAD = (
    "set -e\n"
    + _NEEDS_REPORT
    + """mirror=$1 ref=$2 commit=$3
if [ -n "$commit" ]; then name=refs/mwc/commit
elif [ -z "$ref" ]; then name=HEAD
elif git --git-dir="$mirror" show-ref --verify --quiet "refs/heads/$ref"; then name=refs/heads/$ref
else name=refs/tags/$ref
fi
git --git-dir="$mirror" rev-parse --verify --quiet "$name^{commit}" >&3
"""
)

# $@: git's -c options, then `ls-remote -- URL PATTERN...`. What the remote answers goes to the
# report channel alone.
_REMOTE_REFS = "set -e\n" + _NEEDS_REPORT + 'exec git "$@" >&3\n'

# A git object name (SHA-1 or SHA-256).
_OBJECT_NAME = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


def mirror_head_argv(mirror: str, ref: str | None) -> list[str]:
    """An agent step after a clone's two: the commit the clone checked out, as the agent's
    mirror has it, on the report channel (`report_head` reads it)."""
    branch, commit = _split_ref(ref)
    return ["sh", "-c", _MIRROR_HEAD, "sh", mirror, branch, commit]


def report_head(report: str) -> str | None:
    """The commit a `mirror_head_argv` step reported, when it is an object name."""
    head = report.strip()
    return head if _OBJECT_NAME.fullmatch(head) else None


def remote_refs_argv(url: str, ref: str | None, base: str) -> list[str]:
    """A network step that asks the remote which commit `ref` names now (its default branch
    for None), answered on the report channel (`remote_head` reads it)."""
    patterns = ["HEAD"]
    if ref is not None:
        patterns = [f"refs/heads/{ref}", f"refs/tags/{ref}", f"refs/tags/{ref}^{{}}"]
    return [
        "sh",
        "-c",
        _REMOTE_REFS,
        "sh",
        *_network_options(base),
        "ls-remote",
        "--",
        url,
        *patterns,
    ]


def remote_head(report: str, ref: str | None) -> str | None:
    """The commit `ref` names in a `remote_refs_argv` step's report: the branch of that name,
    else the tag's commit (peeled), else the tag; None when the remote has none of them."""
    found: dict[str, str] = {}
    for line in report.splitlines():
        oid, _, name = line.partition("\t")
        if _OBJECT_NAME.fullmatch(oid):
            found.setdefault(name.strip(), oid)
    if ref is None:
        return found.get("HEAD")
    for name in (f"refs/heads/{ref}", f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}"):
        if name in found:
            return found[name]
    return None


# Step 2 never needs a token; LFS smudge stays off so a checkout never reaches for LFS objects.
WORKSPACE_STEP_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_LFS_SKIP_SMUDGE": "1"}


def checkout_argv(dest: str, ref: str, create_branch: bool) -> list[str]:
    # The trailing "--" makes git read `ref` as a revision, never as a file to overwrite.
    if create_branch:
        return ["git", "-C", repo_dir(dest), "checkout", "--progress", "-b", ref, "--"]
    return ["git", "-C", repo_dir(dest), "checkout", "--progress", ref, "--"]


def head_argv(dest: str) -> list[str]:
    """The commit the repository's HEAD names (nothing when it has none yet)."""
    return ["git", "-C", repo_dir(dest), "rev-parse", "--verify", "--quiet", "HEAD^{commit}"]


def status_argv(dest: str) -> list[str]:
    return [
        "git",
        "-C",
        repo_dir(dest),
        "status",
        "--porcelain=v2",
        "--branch",
        "-z",
        "--untracked-files=all",
    ]


def diff_argv(dest: str, stat: bool, cached: bool) -> list[str]:
    mode = "cached" if cached else "worktree"
    return ["sh", "-c", _DIFF, "sh", repo_dir(dest), "stat" if stat else "patch", mode]


def parse_status(text: str, limit: int = 1000) -> dict[str, object]:
    """Parses `git status --porcelain=v2 --branch -z` into branch facts and entries."""
    out: dict[str, object] = {"branch": None, "head": None, "upstream": None}
    ahead = behind = 0
    entries: list[dict[str, str | None]] = []
    truncated = False
    fields = text.split("\0")
    i = 0
    while i < len(fields):
        line = fields[i]
        i += 1
        if not line:
            continue
        if line.startswith("# "):
            key, _, value = line[2:].partition(" ")
            if key == "branch.oid":
                out["head"] = None if value == "(initial)" else value
            elif key == "branch.head":
                out["branch"] = None if value == "(detached)" else value
            elif key == "branch.upstream":
                out["upstream"] = value
            elif key == "branch.ab":
                parts = value.split()
                ahead, behind = int(parts[0].lstrip("+")), abs(int(parts[1]))
            continue
        entry: dict[str, str | None] | None = None
        if line[0] == "1":
            parts = line.split(" ", 8)
            entry = {"path": parts[8], "index": parts[1][0], "worktree": parts[1][1]}
        elif line[0] == "2":
            parts = line.split(" ", 9)
            orig = fields[i] if i < len(fields) else None
            i += 1  # a rename or copy carries its original path as the next field
            entry = {"path": parts[9], "index": parts[1][0], "worktree": parts[1][1]}
            entry["orig_path"] = orig
        elif line[0] == "u":
            parts = line.split(" ", 10)
            entry = {"path": parts[10], "index": parts[1][0], "worktree": parts[1][1]}
        elif line[0] in "?!":
            entry = {"path": line[2:], "index": line[0], "worktree": line[0]}
        if entry is not None:
            if len(entries) < limit:
                entries.append(entry)
            else:
                truncated = True
    out.update(ahead=ahead, behind=behind, entries=entries, truncated=truncated)
    out["clean"] = not entries and not truncated
    return out
