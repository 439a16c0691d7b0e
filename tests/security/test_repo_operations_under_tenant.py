"""Repository operations under the hostile tenant (`hostile_tenant.py`), started inside the cloned
repository so that it reshapes the tree git walks and writes forged lines into every output it
reaches: `repo_status`, `repo_diff`, `repo_commit`, `repo_push` and `repo_pull_request` answer,
the push lands what the workspace committed and says so, and the host's canary reaches no answer
and nothing under the data root. Isolated local workspaces only (the tenant writes into every
output of its uid it can open, which only a pid namespace keeps to the workspace)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from modal_workspace_core.drivers.local.bubblewrap import probe
from support.fake_github import FakeGitHub
from support.git_server import HELLO_REPO, GitServer

from .hostile_tenant import CANARY, TENANT, Canary, assert_no_leak, launch_command
from .repo_rig import follow, ok, remote_sha, repo_api, sh

# A push the tenant spoiled is tried again, as a client would.
PUSH_TRIES = 3

pytestmark = pytest.mark.skipif(
    not probe().enabled, reason=f"needs bubblewrap for the tenant: {probe()}"
)


def test_status_diff_commit_push_and_pull_request_under_the_tenant(
    tmp_path: Path, github_app: FakeGitHub, git_server: GitServer
) -> None:
    canary = Canary.make(tmp_path)
    with repo_api(tmp_path, github_app) as api:
        ws = ok(api.post("/workspaces", json={}))["workspace_id"]
        clone = ok(
            api.post(
                f"/workspaces/{ws}/repo/clone",
                json={"repository": HELLO_REPO, "use_github_token": True},
            )
        )
        assert follow(api, ws, clone["exec_id"])["returncode"] == 0
        tracked = sh(api, ws, "cd hello && git ls-files | head -n 1").strip()
        sh(
            api,
            ws,
            f"cd hello && echo changed-under-tenant >> '{tracked}' && "
            "printf 't/\\n.tenant.py\\n' >> .git/info/exclude",
        )
        written = api.put(
            f"/workspaces/{ws}/files/content", json={"path": "hello/.tenant.py", "content": TENANT}
        )
        assert written.status_code == 200, written.text
        assert "tenant-ready" in sh(api, ws, f"cd hello && {launch_command(canary)}")

        answers = []
        status = ok(api.get(f"/workspaces/{ws}/repo/status", params={"destination": "hello"}))
        answers.append(status)
        assert tracked in str(status), status
        diff = ok(api.get(f"/workspaces/{ws}/repo/diff", params={"destination": "hello"}))
        answers.append(diff)
        assert "+changed-under-tenant" in diff["diff"], diff
        committed = ok(
            api.post(
                f"/workspaces/{ws}/repo/commit",
                json={
                    "destination": "hello",
                    "message": "under the tenant",
                    "paths": [f"hello/{tracked}"],
                },
            )
        )
        answers.append(committed)
        # The tenant can spoil its own push: the bundle step runs as the workspace, and the
        # tenant writes into every descriptor of its uid's processes, among them pack-objects'
        # stdout, which is the bundle file. What the gateway answers must be true every time
        # (never "pushed" when the remote lacks the commit), and a push tried again lands.
        for _ in range(PUSH_TRIES):
            pushed = ok(
                api.post(
                    f"/workspaces/{ws}/repo/push",
                    json={
                        "destination": "hello",
                        "branch": "main",
                        "remote_branch": "tenant-work",
                    },
                )
            )
            answers.append(pushed)
            if pushed["pushed"]:
                break
            assert pushed["error"] and remote_sha(git_server, "tenant-work") is None, pushed
        assert pushed["pushed"] and pushed["created"], pushed
        # What the push says it pushed is what the remote has, and what the workspace committed.
        assert pushed["commit"] == remote_sha(git_server, "tenant-work"), pushed
        # The tenant writes its forged lines into this command's output too (it is of the same
        # uid): the workspace's HEAD is the one line of 40 hex digits among them.
        head = re.findall(r"^[0-9a-f]{40}$", sh(api, ws, "cd hello && git rev-parse HEAD"), re.M)
        assert head == [pushed["commit"]], head
        assert [c["subject"] for c in pushed["commits"]] == ["under the tenant"], pushed
        pull = api.post(
            f"/workspaces/{ws}/repo/pull-request",
            json={"destination": "hello", "title": "Under the tenant", "head": "tenant-work"},
        )
        answers.append(pull.json())
        assert pull.status_code == 200, pull.text
        assert CANARY not in str(answers), answers
        assert_no_leak(tmp_path / "data", canary)
