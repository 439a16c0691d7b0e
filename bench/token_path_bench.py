"""What keeping the GitHub token out of root commands' reach costs on Modal, in bytes through the
gateway, for a repository of about 100 MiB (docs/modal.md, "Who runs commands").

    python bench/token_path_bench.py [--size 100M] [--commits 4]

Two designs keep a token away from a workspace's commands: git runs inside the workspace as a
uid the commands are not (chosen: commands are unprivileged by default), or every token-bearing
git runs in the gateway (the workspace's bundle comes out over the channel, a private clone goes
in as a bundle). The first moves only the channel's requests and events through the gateway;
the second moves the repository itself.

Measured in one run, on the local driver (isolated where bubblewrap works), against a local
smart-HTTP git server in a process of its own:
- chosen: the gateway process's own bytes read and written (`/proc/self/io`, rchar + wchar)
  during a token clone and a one-commit push through the product;
- gateway-side git: what that gateway would carry, done with git for real: a clone's pack in
  from the server and its bundle out to the workspace; a push's bundle in from the workspace
  and, so that its thin pack applies, a depth-1 fetch of the commit it builds on.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agent_stack import cpu_model
from modal_workspace_core.config import load_settings
from modal_workspace_core.surfaces.python_client import Workspaces
from snapshot_bench import parse_size

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.git_server import GitServer

REPO = "octo/big"
TOKEN = "ghp_" + "b" * 36


def git(cwd: Path | None, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **(env or {})}, check=True, capture_output=True
    )
    return done.stdout.decode()


def make_repo(root: Path, size: int, commits: int) -> None:
    """`octo/big`: `commits` commits of incompressible files, `size` bytes in all."""
    work = root.parent / "work"
    git(None, "init", "-q", "-b", "main", str(work))
    per = size // commits // 8
    for c in range(commits):
        for f in range(8):
            (work / f"data{f}.bin").write_bytes(os.urandom(per))
        git(work, "add", "-A")
        git(work, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", f"c{c}")
    bare = root / f"{REPO}.git"
    bare.parent.mkdir(parents=True, exist_ok=True)
    git(None, "clone", "-q", "--bare", str(work), str(bare))


def serve(root: Path, ready: multiprocessing.Queue[str]) -> None:
    server = GitServer(root=root, username="x-access-token", token=TOKEN).start()
    ready.put(server.base_url)
    while True:
        time.sleep(3600)


def io_bytes() -> int:
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["rchar"]) + int(fields["wchar"])


async def chosen(base_url: str, data_root: Path) -> dict[str, int]:
    port = base_url.rstrip("/").rsplit(":", 1)[1]
    data_root.mkdir()
    secrets = data_root.parent / "secrets.json"
    secrets.write_text(json.dumps({"github": {"GH_TOKEN": TOKEN}}))
    env = {
        **os.environ,
        "MODAL_WORKSPACE_DATA_ROOT": str(data_root),
        "MODAL_WORKSPACE_GITHUB_URL": base_url,
        "MODAL_WORKSPACE_HOST_PORTS": port,
        "MODAL_WORKSPACE_LOCAL_SECRETS_FILE": str(secrets),
        "MODAL_WORKSPACE_ALLOWED_SECRETS": "github:GH_TOKEN",
    }
    out: dict[str, int] = {}
    async with Workspaces(settings=load_settings(env)) as wss:
        ws = await wss.create()
        before = io_bytes()
        clone = await ws.repo_clone(REPO, use_github_token=True)
        [e async for e in ws.follow(clone.exec_id)]
        out["clone"] = io_bytes() - before
        status = await ws.realtime_exec_status(clone.exec_id)
        assert status.returncode == 0, status
        made = await ws.exec("cd big && echo change > change.txt && git add change.txt")
        assert made.returncode == 0, made.stderr
        await ws.repo_commit("one change", destination="/workspace/big")
        before = io_bytes()
        pushed = await ws.repo_push(destination="/workspace/big")
        out["push"] = io_bytes() - before
        assert pushed.pushed, pushed.error
    return out


def objects_bytes(repo: Path) -> int:
    """What a fetch brought: the packs (and loose objects, below git's unpack limit) it wrote."""
    return sum(
        p.stat().st_size
        for p in (repo / "objects").rglob("*")
        if p.is_file() and p.suffix not in (".idx", ".rev")
    )


def gateway_side(base_url: str, scratch: Path) -> dict[str, int]:
    """What a gateway running the token-bearing git itself would carry, done for real."""
    url = f"{base_url}{REPO}.git"
    askpass = scratch / "askpass.sh"
    askpass.write_text(
        f'#!/bin/sh\ncase "$1" in Username*) echo x-access-token;; *) echo {TOKEN};; esac\n'
    )
    askpass.chmod(0o700)
    env = {"GIT_ASKPASS": str(askpass), "GIT_TERMINAL_PROMPT": "0"}
    # A clone: the whole repository in, and again out to the workspace as a bundle.
    mirror = scratch / "mirror.git"
    git(None, "clone", "-q", "--mirror", url, str(mirror), env=env)
    pack_in = objects_bytes(mirror)
    bundle = scratch / "clone.bundle"
    git(mirror, "bundle", "create", "-q", str(bundle), "--all")
    # A push of one commit: its bundle in from the workspace, and the commit it builds on (a
    # thin pack's bases) fetched at depth 1 into a scratch repository of the gateway's.
    work = scratch / "work"
    git(None, "clone", "-q", str(mirror), str(work))
    base = git(work, "rev-parse", "HEAD").strip()
    (work / "change.txt").write_text("change\n")
    git(work, "add", "change.txt")
    git(work, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "one change")
    push_bundle = scratch / "push.bundle"
    git(work, "bundle", "create", "-q", str(push_bundle), "main", "--not", base)
    shallow = scratch / "shallow.git"
    git(None, "init", "-q", "--bare", str(shallow))
    git(shallow, "fetch", "-q", "--depth=1", url, base, env=env)
    base_in = objects_bytes(shallow)
    return {
        "clone": pack_in + bundle.stat().st_size,
        "push": push_bundle.stat().st_size + base_in,
    }


def mib(n: int) -> str:
    return f"{n / (1 << 20):.2f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", default="100M", type=parse_size)
    parser.add_argument("--commits", default=4, type=int)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mwc-token-bench-", dir="/tmp") as tmp:
        root = Path(tmp) / "repos"
        make_repo(root, args.size, args.commits)
        ready: multiprocessing.Queue[str] = multiprocessing.Queue()
        server = multiprocessing.Process(target=serve, args=(root, ready), daemon=True)
        server.start()
        try:
            base_url = ready.get(timeout=30)
            ours = asyncio.run(chosen(base_url, Path(tmp) / "data"))
            scratch = Path(tmp) / "gateway"
            scratch.mkdir()
            theirs = gateway_side(base_url, scratch)
        finally:
            server.terminate()
    print(f"# {cpu_model()}, a repository of {mib(args.size)} in {args.commits} commits\n")
    print("| operation | git in the workspace (chosen) | git in the gateway | ratio |")
    print("|---|---:|---:|---:|")
    for op in ("clone", "push"):
        ratio = theirs[op] / max(ours[op], 1)
        print(f"| {op} (token) | {mib(ours[op])} | {mib(theirs[op])} | {ratio:.0f}x |")


if __name__ == "__main__":
    main()
