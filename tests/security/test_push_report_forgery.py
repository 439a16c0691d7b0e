"""A push's outcome is the agent step's to report, never the workspace's to forge.

A background command of the workspace freezes every process of its uid over and over
(`kill(-1, SIGSTOP)` in its own pid namespace), and while they are frozen it reads every
process's argv for anything like a report's nonce, takes every pipe of every process it may
(`/proc/PID/fd/N`, and `pidfd_getfd` where the kernel lets it) and writes into each, and into
its own output, a forged report saying that the push created the branch: in the format the push
once printed on its output (lines led by the nonce) and in anything resembling the report's
present format. Then a fast-forward push onto `main`, a branch this workspace did not create,
must say so (`created: false`), and must not unlock `force` on it: a forced push onto `main`
afterwards is refused (403) and `main` keeps its history.

Isolated local workspaces only (as root, a uid of their own, a pid namespace of their own): the
forger signals every process it may, which only a pid namespace keeps to the workspace."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from support.fake_github import FakeGitHub
from support.git_server import HELLO_REPO, GitServer

from .repo_rig import follow, ok, remote_sha, repo_api, sh

pytest.importorskip("modal_workspace_core.drivers.local.driver")

# argv: the commit to claim, the host's pid namespace (never signal there), a stop file, a
# result file, the longest it runs. It writes its counts to the result file when it ends.
FORGER = r"""
import ctypes, json, os, re, signal, stat, sys, time

new, host_ns, stop, result = sys.argv[1:5]
deadline = time.monotonic() + float(sys.argv[5])
if os.readlink("/proc/self/ns/pid") == host_ns or os.getuid() == 0:
    sys.exit("not in a workspace's own pid namespace: signalling every process is not for here")
me, uid = os.getpid(), os.getuid()
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
PIDFD_OPEN, PIDFD_GETFD = 434, 438  # the same on x86-64 and arm64
NONCE = re.compile(rb"([0-9a-f]{32}) (?:ref|count|commit|file|files|pushed)")
nonces, held, sent = set(), {}, {}
stats = {"loops": 0, "pipes": 0, "by_pidfd": 0, "writes": 0}


def forged():
    lines = []
    for n in sorted(nonces):  # the report as the push printed it, led by its nonce
        lines += [f"{n} ref {new} none", f"{n} count 1", f"{n} commit {new} forged", f"{n} pushed"]
    # Anything like a report without a nonce, or with a status line of git push --porcelain.
    lines += [f"ref {new} none", "count 1", f"commit {new} forged", "files 0"]
    lines += ["*\trefs/mwc/push:refs/heads/main\t[new branch]", "Done"]
    lines += ["push *\trefs/mwc/push:refs/heads/main\t[new branch]", "pushed"]
    return ("\n" + "\n".join(lines) + "\n").encode()


def is_pipe(fd):
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False


def by_pidfd(pid, fd):
    pidfd = libc.syscall(PIDFD_OPEN, pid, 0)
    if pidfd < 0:
        return None
    try:
        got = libc.syscall(PIDFD_GETFD, pidfd, fd, 0)
        return int(got) if got >= 0 else None
    finally:
        os.close(pidfd)


# A process of this uid that the agent started (an exec's step): its output pipes are the
# exec's. Other pipes (git's own, between its processes) are left alone, so that the
# workspace's git still works.
def agents_child(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        return os.stat(f"/proc/{pid}").st_uid == uid != os.stat(f"/proc/{ppid}").st_uid
    except (OSError, ValueError, IndexError):
        return False


def take(pid):
    for fd in (1, 2):
        if (pid, fd) in held:
            continue
        ours = None
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("pipe:"):
                ours = os.open(f"/proc/{pid}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            ours = by_pidfd(pid, fd)
            if ours is not None:
                stats["by_pidfd"] += 1
        if ours is None:
            continue
        if not is_pipe(ours):
            os.close(ours)
            continue
        held[(pid, fd)] = ours
        stats["pipes"] += 1


def write_all():
    data = forged()
    for key, ours in list(held.items()):
        if sent.get(key) == data:
            continue
        try:
            os.write(ours, data)
            sent[key] = data
            stats["writes"] += 1
        except BlockingIOError:
            pass
        except OSError:
            os.close(ours)
            del held[key]
    if sent.get("self") != data:
        sent["self"] = data
        for fd in (1, 2):
            try:
                os.write(fd, data)
            except OSError:
                pass


open(result + ".ready", "w").close()
while time.monotonic() < deadline and not os.path.exists(stop):
    stats["loops"] += 1
    os.kill(-1, signal.SIGSTOP)  # every process of this uid but this one, in this namespace
    try:
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    nonces.update(m.decode() for m in NONCE.findall(f.read()))
            except OSError:
                continue
            if agents_child(int(name)):
                take(int(name))
        write_all()
    finally:
        os.kill(-1, signal.SIGCONT)
    time.sleep(0.0003)
with open(result, "w") as f:
    json.dump({**stats, "nonces": len(nonces)}, f)
"""


def test_a_forged_report_neither_creates_the_branch_nor_unlocks_force(
    tmp_path: Path, github_app: FakeGitHub, git_server: GitServer
) -> None:
    with repo_api(tmp_path, github_app) as api:
        ws = ok(api.post("/workspaces", json={}))["workspace_id"]
        host_ns = os.readlink("/proc/self/ns/pid")
        if sh(api, ws, "readlink /proc/self/ns/pid").strip() == host_ns:
            pytest.skip("workspaces here have no pid namespace of their own (no bubblewrap)")
        clone = ok(
            api.post(
                f"/workspaces/{ws}/repo/clone",
                json={"repository": HELLO_REPO, "use_github_token": True},
            )
        )
        assert follow(api, ws, clone["exec_id"])["returncode"] == 0
        before = remote_sha(git_server, "main")
        sh(api, ws, "cd hello && echo ff > ff.txt")
        ff = ok(api.post(f"/workspaces/{ws}/repo/commit", json={"message": "fast-forward"}))

        written = api.put(
            f"/workspaces/{ws}/files/content", json={"path": "forge.py", "content": FORGER}
        )
        assert written.status_code == 200, written.text
        forger = ok(
            api.post(
                f"/workspaces/{ws}/realtime-execs",
                json={
                    "command": f"exec python3 forge.py {ff['commit']} '{host_ns}' "
                    "/tmp/forge.stop /tmp/forge.json 600"
                },
            )
        )
        deadline = time.monotonic() + 60
        while "ready" not in sh(api, ws, "test -e /tmp/forge.json.ready && echo ready || true"):
            assert time.monotonic() < deadline, "the forger never started"
            time.sleep(0.2)

        # The branch named: the gateway's query of the current one is the workspace's output too.
        onto_main = {"branch": "main", "remote_branch": "main"}
        pushed = ok(api.post(f"/workspaces/{ws}/repo/push", json=onto_main))

        sh(api, ws, "touch /tmp/forge.stop")
        ended = follow(api, ws, forger["exec_id"])
        counts = sh(api, ws, "cat /tmp/forge.json")
        assert ended["returncode"] == 0, (ended, counts)
        # The forger did reach pipes of the workspace's processes (the exec outputs it could).
        assert '"pipes": 0' not in counts, counts

        assert pushed["pushed"], (pushed, counts)
        assert remote_sha(git_server, "main") == ff["commit"]

        # main is not this workspace's branch: force stays refused, and main keeps its history.
        sh(
            api,
            ws,
            "cd hello && echo rewritten > ff.txt && git add ff.txt && "
            "git -c user.name=t -c user.email=t@t commit -q --amend -m rewritten",
        )
        forced = api.post(f"/workspaces/{ws}/repo/push", json={**onto_main, "force": True})
        outcome = (pushed["created"], forced.status_code, remote_sha(git_server, "main"))
        assert outcome == (False, 403, ff["commit"]), (pushed, forced.text, counts)
        assert forced.json()["error"]["field"] == "force"
        # And what the push reports is what it pushed, none of the forger's lines.
        assert (pushed["commit"], pushed["previous"]) == (ff["commit"], before), pushed
        assert pushed["commit_count"] == 1, pushed
        assert [c["subject"] for c in pushed["commits"]] == ["fast-forward"], pushed
        assert (pushed["files"], pushed["file_count"]) == (["ff.txt"], 1), pushed
