"""The git command lines the repo operations run, and the parser of `git status` output.

Argv is built only from policy-checked values, and every script here is a constant that takes
those values as positional parameters: no client text is ever spliced into shell source.
"""

from __future__ import annotations

import re

__all__ = [
    "ASKPASS_SCRIPT",
    "checkout_argv",
    "clone_argv",
    "diff_argv",
    "fetch_argv",
    "parse_status",
    "status_argv",
    "with_askpass",
]

TOKEN_ENV = "MWC_GIT_TOKEN"
# Git asks for a username, then a password; GitHub takes any username with a token password.
# The token is read from this exec's environment: it is never in the file, an argv or a URL.
ASKPASS_SCRIPT = f"""#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' x-access-token ;;
  *) printf '%s\\n' "${TOKEN_ENV}" ;;
esac
"""
_COMMIT = re.compile(r"[0-9a-fA-F]{7,40}")

# $1 = askpass script; the rest is the git argv. chmod is needed because the agent writes files
# with ordinary permissions, and git runs GIT_ASKPASS directly (never through a shell).
_ASKPASS_RUNNER = 'chmod 700 -- "$1" && shift && exec "$@"'

# $1 url, $2 dest, $3 commit, $4 depth ("" for a full clone). A commit cannot be named by
# `clone --branch`, so fetch it by id into an empty clone and detach there.
_CLONE_COMMIT = """set -e
if [ -n "$4" ]; then set -- "$1" "$2" "$3" "--depth=$4"; else set -- "$1" "$2" "$3"; fi
url=$1 dest=$2 commit=$3; shift 3
git clone --progress --no-checkout "$@" -- "$url" "$dest"
git -C "$dest" fetch --progress "$@" origin "$commit"
git -C "$dest" checkout --progress --detach FETCH_HEAD
"""

# $1 repo dir, $2 "stat" or "patch", $3 "cached" or "worktree". For the working tree, untracked
# files are shown as new by marking them intent-to-add in a throwaway copy of the index, so the
# repository's real index is never touched.
_DIFF = """set -e
cd -- "$1"
if [ "$2" = stat ]; then fmt=--stat; else fmt=--patch; fi
if [ "$3" = cached ]; then exec git diff --cached --no-color --no-ext-diff "$fmt"; fi
gitdir=$(git rev-parse --absolute-git-dir)
tmp="$gitdir/mwc-diff-index.$$"
trap 'rm -f "$tmp"' EXIT
if [ -f "$gitdir/index" ]; then cp "$gitdir/index" "$tmp"; fi
git ls-files -z --others --exclude-standard | GIT_INDEX_FILE=$tmp xargs -0 -r git add -N --
GIT_INDEX_FILE=$tmp git diff --no-color --no-ext-diff "$fmt"
"""


def _dir(rel: str) -> str:
    # A relative path that starts with "-" must never look like an option.
    return "." if rel == "." else f"./{rel}"


def is_commit(ref: str) -> bool:
    return bool(_COMMIT.fullmatch(ref))


def clone_argv(url: str, dest_rel: str, ref: str | None, depth: int | None) -> list[str]:
    if ref is not None and is_commit(ref):
        return ["sh", "-c", _CLONE_COMMIT, "sh", url, _dir(dest_rel), ref, str(depth or "")]
    argv = ["git", "clone", "--progress"]
    if depth is not None:
        argv.append(f"--depth={depth}")
    if ref is not None:
        argv.append(f"--branch={ref}")
    return [*argv, "--", url, _dir(dest_rel)]


def fetch_argv(dest_rel: str, ref: str | None, depth: int | None) -> list[str]:
    argv = ["git", "-C", _dir(dest_rel), "fetch", "--progress"]
    if depth is not None:
        argv.append(f"--depth={depth}")
    argv.append("origin")
    if ref is not None:
        argv.append(ref)
    return argv


def checkout_argv(dest_rel: str, ref: str, create_branch: bool) -> list[str]:
    # The trailing "--" makes git read `ref` as a revision, never as a file to overwrite.
    if create_branch:
        return ["git", "-C", _dir(dest_rel), "checkout", "--progress", "-b", ref, "--"]
    return ["git", "-C", _dir(dest_rel), "checkout", "--progress", ref, "--"]


def with_askpass(argv: list[str], askpass_path: str) -> list[str]:
    return ["sh", "-c", _ASKPASS_RUNNER, "sh", askpass_path, *argv]


def status_argv(dest_rel: str) -> list[str]:
    return [
        "git",
        "-C",
        _dir(dest_rel),
        "status",
        "--porcelain=v2",
        "--branch",
        "-z",
        "--untracked-files=all",
    ]


def diff_argv(dest_rel: str, stat: bool, cached: bool) -> list[str]:
    mode = "cached" if cached else "worktree"
    return ["sh", "-c", _DIFF, "sh", _dir(dest_rel), "stat" if stat else "patch", mode]


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
