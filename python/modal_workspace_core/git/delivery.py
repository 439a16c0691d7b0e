"""The git command lines that take work out of a workspace: a commit, and a push in two steps.

A push never lets the git that holds the token read the workspace's repository, whose files,
configuration and hooks are the workspace's to forge:
1. as the workspace (no token): `git bundle` writes the branch's new commits into a file in the
   workspace's `/tmp`;
2. as the agent (the token reaches this step's git only through its askpass): `mwc-agent stage`
   copies that file into the step's private home (contained: no link out, no FIFO, no
   hard-linked file), git fetches it into the agent's own mirror with every object checked, and
   pushes from the mirror, where nothing of the workspace's configuration applies.
The push step reports what it pushed on its report channel (`REPORT_FD`, 3: a pipe only that
step's processes hold and only the agent reads, returned by `exec.status` with `report`), never
on the exec's output, which every process of the workspace may write to. It is the exec's last
step; the bundle is removed afterwards by an exec of its own, whose output nobody reads.
Every script is a constant taking its values as positional parameters: no value the gateway
decides on is in any argv.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from .commands import _NETWORK_CONFIG, repo_dir

__all__ = [
    "COMMIT_MARK",
    "NOTHING_TO_COMMIT",
    "PushReport",
    "bundle_argv",
    "bundle_path",
    "commit_argv",
    "parse_commit",
    "parse_push_report",
    "push_argv",
    "push_env",
    "remove_bundle_argv",
]

# What the commit script exits with when there is nothing to commit.
NOTHING_TO_COMMIT = 3
# The line after which the commit script prints its facts (hooks may print before it).
COMMIT_MARK = "mwc-commit-done"
# The largest bundle a push takes.
MAX_BUNDLE_BYTES = 2 << 30
# The most commits and files a push's report lists (it counts them all).
MAX_REPORTED = 200

# $1 repo dir, $2 all|paths, $3 message; the rest: literal pathspecs. The author and committer
# come from the step's environment. Any process of the workspace may write lines into this
# step's output (or into a pipe inside it), so each fact is a whole line that git itself writes
# with its prefix, and the parser skips every other line.
_COMMIT = """set -e
cd -- "$1"
mode=$2 message=$3
shift 3
if [ "$mode" = all ]; then git add --all; else git add --all -- "$@"; fi
if git diff --cached --quiet -- "$@"; then
  echo "nothing to commit: no changes" >&2
  exit 3
fi
git commit --quiet --message="$message" -- "$@"
echo mwc-commit-done
git log -1 --format="commit %H%nrefs %D" HEAD
git diff-tree --no-commit-id --numstat -r --root HEAD | head -n 1001
"""

# $1 repo dir, $2 branch, $3 bundle path. The commits origin does not have (as far as the
# workspace's own `origin/*` refs say), or the tip alone when it has them all (git refuses an
# empty bundle). No command substitution decides which: another process of the workspace can
# write into its pipe, and did, turning a count into words and the bundle into one the push
# could not take.
_BUNDLE = """set -e
cd -- "$1"
ref="refs/heads/$2" bundle=$3
git rev-parse --verify --quiet "$ref^{commit}" >/dev/null || {
  echo "no branch '$2' in this repository" >&2
  exit 4
}
umask 022
rm -f -- "$bundle"
git bundle create --quiet "$bundle" "$ref" --not --remotes=origin 2>/dev/null ||
  git bundle create --quiet "$bundle" -1 "$ref"
"""

# $1 bundle's dir, $2 bundle's name there, $3 mirror, $4 url, $5 branch, $6 remote branch,
# $7 lease ("" for a plain push), $8 most bundle bytes. The report goes to descriptor 3 (the
# agent's report channel), git's answer to the exec's output as well, for the client to read.
_PUSH = """set -e
[ -n "${MWC_AGENT_PYTHON-}" ] || { echo "this workspace's agent cannot stage a push" >&2; exit 1; }
[ "${MWC_REPORT_FD-}" = 3 ] || {
  echo "this workspace's agent cannot report a push: create the workspace again" >&2
  exit 1
}
dir=$1 name=$2 mirror=$3 url=$4 branch=$5 dst=$6 lease=$7 max=$8
staged="$HOME/push-$$.bundle" answer="$HOME/push-$$.status" lists="$HOME/push-$$.lists"
trap 'rm -f -- "$staged" "$answer" "$lists"' EXIT
"$MWC_AGENT_PYTHON" -I -m modal_workspace_core.agent stage --root "$dir" --path "$name" \\
  --to "$staged" --max-bytes "$max"
if [ ! -d "$mirror" ]; then
  mkdir -p -- "${mirror%/*}"
  git init --quiet --bare "$mirror"
fi
export GIT_DIR="$mirror"
git -c protocol.file.allow=always -c transfer.fsckObjects=true -c fetch.fsckObjects=true \\
  fetch --quiet --no-tags --no-write-fetch-head "$staged" "+refs/heads/$branch:refs/mwc/push"
new=$(git rev-parse --verify "refs/mwc/push^{commit}")
old=$(git ls-remote --heads -- "$url" | awk -v r="refs/heads/$dst" '$2 == r { print $1 }')
if [ -n "$old" ] && ! git cat-file -e "$old^{commit}" 2>/dev/null; then
  git fetch --quiet --no-tags --no-write-fetch-head -- "$url" "+refs/heads/$dst:refs/mwc/remote"
fi
echo "ref $new ${old:-none}" >&3
if [ -n "$old" ]; then
  set -- "$new" --not "$old"
else
  set -- "$new" --not --exclude='refs/mwc/*' --branches
fi
echo "count $(git rev-list --count "$@")" >&3
echo "files $(git log --format= --name-only "$@" | sort -u | wc -l)" >&3
# The lists go last, after what the gateway decides on: a report cut at its bound loses only
# their end. A subject is cut to 1300 bytes (the answer keeps its first 300 characters).
git log --max-count=200 --format="commit %H %s" "$@" | cut -b 1-1300 >"$lists"
git log --format= --name-only "$@" | sort -u | head -n 200 | sed "s/^/file /" >>"$lists"
code=0
if [ -n "$lease" ]; then
  # No "+" on the refspec: it would force past the lease.
  git push --porcelain "--force-with-lease=refs/heads/$dst:$lease" -- "$url" \\
    "refs/mwc/push:refs/heads/$dst" >"$answer" || code=$?
else
  git push --porcelain -- "$url" "refs/mwc/push:refs/heads/$dst" >"$answer" || code=$?
fi
cat -- "$answer"
sed "s/^/status /" "$answer" >&3
[ "$code" = 0 ] || exit "$code"
git update-ref "refs/heads/$dst" "$new"
echo pushed >&3
cat -- "$lists" >&3
"""


def commit_argv(dest: str, message: str, paths: list[str] | None) -> list[str]:
    """`paths` are relative to the repository, each taken literally (no glob, no magic)."""
    specs = [f":(literal){p}" for p in paths or []]
    mode = "paths" if paths else "all"
    return ["sh", "-c", _COMMIT, "sh", repo_dir(dest), mode, message, *specs]


def commit_env(name: str, email: str) -> dict[str, str]:
    return {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
        "GIT_TERMINAL_PROMPT": "0",
    }


# The most changed files a commit's answer lists.
MAX_COMMIT_FILES = 1000


@dataclass(frozen=True)
class CommitFacts:
    commit: str
    branch: str | None
    files: list[dict[str, object]]
    truncated: bool = False


_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def parse_commit(stdout: str) -> CommitFacts | None:
    """The facts the commit script prints after its mark (None when it printed none): its
    `commit` and `refs` lines and the numstat lines, among whatever else the workspace's
    processes wrote into the same output."""
    _, mark, rest = stdout.rpartition(f"\n{COMMIT_MARK}\n")
    if not mark:
        if not stdout.startswith(f"{COMMIT_MARK}\n"):
            return None
        rest = stdout[len(COMMIT_MARK) + 1 :]
    commit: str | None = None
    branch: str | None = None
    files: list[dict[str, object]] = []
    for line in rest.split("\n"):
        parts = line.split("\t", 2)
        if len(parts) == 3 and all(_NUMSTAT_COUNT.fullmatch(n) for n in parts[:2]):
            added, removed, path = parts
            files.append(
                {
                    "path": path,
                    "added": int(added) if added.isdigit() else None,
                    "removed": int(removed) if removed.isdigit() else None,
                }
            )
        elif commit is None and line.startswith("commit ") and _SHA.fullmatch(line[7:]):
            commit = line[7:]
        elif commit is not None and branch is None and line.startswith("refs "):
            branch = _head_branch(line[5:])
    if commit is None:
        return None
    return CommitFacts(
        commit=commit,
        branch=branch,
        files=files[:MAX_COMMIT_FILES],
        truncated=len(files) > MAX_COMMIT_FILES,
    )


# A numstat count: lines added or removed, or "-" for a binary file.
_NUMSTAT_COUNT = re.compile(r"[0-9]+|-")


def _head_branch(decorations: str) -> str | None:
    """The branch in git's `%D` (`HEAD -> main, origin/main, tag: v1`; a ref name holds no
    space), or None for a detached HEAD."""
    for name in decorations.split(", "):
        if name.startswith("HEAD -> "):
            return name[len("HEAD -> ") :] or None
    return None


def bundle_path(exec_id: str) -> tuple[str, str]:
    """(directory, name) of a push's bundle: the workspace's own /tmp, which its commands and
    the agent's steps both see (every driver gives a workspace a private one), never a path in
    /workspace that a failed push would leave behind in the user's files."""
    return "/tmp", f"mwc-push-{exec_id}.bundle"


def bundle_argv(dest: str, branch: str, bundle: str) -> list[str]:
    return ["sh", "-c", _BUNDLE, "sh", repo_dir(dest), branch, bundle]


def remove_bundle_argv(bundle: str) -> list[str]:
    """An exec of its own, after the push's: no step of the workspace's runs after the push
    step in the exec whose outcome the gateway reads."""
    return ["rm", "-f", "--", bundle]


def push_argv(
    bundle_dir: str,
    bundle_name: str,
    mirror: str,
    url: str,
    branch: str,
    remote_branch: str,
    lease: str | None,
) -> list[str]:
    return [
        "sh",
        "-c",
        _PUSH,
        "sh",
        bundle_dir,
        bundle_name,
        mirror,
        url,
        branch,
        remote_branch,
        lease or "",
        str(MAX_BUNDLE_BYTES),
    ]


def push_env(askpass: str, base: str) -> dict[str, str]:
    """The agent step's environment: no configuration file, the network configuration of every
    token-holding git (`commands._NETWORK_CONFIG`, as `GIT_CONFIG_*` so that each git of the
    script has it) and the askpass."""
    config = list(_NETWORK_CONFIG)
    if base.startswith("http://"):
        config.append("protocol.http.allow=always")  # a local or test server only
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": askpass,
        "GIT_CONFIG_COUNT": str(len(config)),
    }
    for i, item in enumerate(config):
        key, _, value = item.partition("=")
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


@dataclass
class PushReport:
    """What the push step reported on its report channel (`exec.status`'s `report`): written by
    the agent's git alone, so what the gateway records comes from here and nowhere else."""

    new: str | None = None
    old: str | None = None
    commit_count: int = 0
    commits: list[dict[str, str]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    file_count: int = 0
    # git push --porcelain's line for each ref: (flag, "src:dst", summary).
    statuses: list[tuple[str, str, str]] = field(default_factory=list)
    pushed: bool = False

    def status_of(self, remote_branch: str) -> tuple[str, str] | None:
        """(flag, summary) of git's answer for the remote branch: `*` it was created, ` ` fast
        forwarded, `+` forced, `=` already there, `!` refused."""
        dst = f"refs/heads/{remote_branch}"
        for flag, refs, summary in self.statuses:
            if refs.rpartition(":")[2] == dst:
                return flag, summary
        return None

    def created(self, remote_branch: str) -> bool:
        """The push created the branch: the remote had no such branch before it (the step's own
        ls-remote) and git's answer for it says a new ref. Both, or it did not."""
        status = self.status_of(remote_branch)
        return self.pushed and self.old is None and status is not None and status[0] == "*"


def parse_push_report(report: str, truncated: bool = False) -> PushReport:
    """`truncated`: the agent kept only the report's start, whose last line may be cut short."""
    parsed = PushReport()
    lines = report.split("\n")
    if truncated:
        lines = lines[:-1]
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind == "ref":
            new, _, old = rest.partition(" ")
            parsed.new = new if _SHA.fullmatch(new) else None
            parsed.old = old if _SHA.fullmatch(old) else None
        elif kind == "count" and rest.strip().isdigit():
            parsed.commit_count = int(rest)
        elif kind == "commit":
            sha, _, subject = rest.partition(" ")
            if _SHA.fullmatch(sha) and len(parsed.commits) < MAX_REPORTED:
                parsed.commits.append({"commit": sha, "subject": subject[:300]})
        elif kind == "file" and len(parsed.files) < MAX_REPORTED:
            parsed.files.append(rest)
        elif kind == "files" and rest.strip().isdigit():
            parsed.file_count = int(rest)
        elif kind == "status":
            # `FLAG<TAB>src:dst<TAB>summary`; "To URL" and "Done" are git's too, and skipped.
            parts = rest.split("\t")
            if len(parts) >= 3 and len(parts[0]) == 1 and len(parsed.statuses) < MAX_REPORTED:
                parsed.statuses.append((parts[0], parts[1], parts[2]))
        elif kind == "pushed" and not rest:
            parsed.pushed = True
    return parsed


def push_record_key(workspace_id: str, url: str, branch: str) -> str:
    """The managed tag under which a workspace records a branch it created by a push (its value:
    the commit it last pushed there): what lets it force-push that branch, and only that one."""
    digest = hashlib.sha256(f"{workspace_id}\0{url}\0{branch}".encode()).hexdigest()[:24]
    return f"repo-push-{digest}"
