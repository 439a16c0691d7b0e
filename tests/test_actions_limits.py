"""Every operation of the GPT Actions schema, called over REST with the largest values the schema
allows and the worst content a workspace can hold (quotes, backslashes and control characters,
which JSON escapes to two or six characters; binary files, which travel as base64), answers in
under 100 000 characters and 45 s: GPT Actions' limits, by construction rather than by default.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest
from e2e_support import Served, local_backend, serve
from service_support import TOKEN
from support.fake_github import FakeGitHub
from support.git_server import HELLO_BRANCHES, HELLO_REPO, GitServer

ACTIONS_CHARS = 100_000
ACTIONS_SECONDS = 45.0
# Writes content whose JSON is as long as it can be, inside the workspace: every character of
# it escaped, most to six characters (`text PATH BYTES`), or files whose names are (`names DIR N`).
GENERATOR = """import os, sys
worst = '"\\\\' + ''.join(map(chr, (1, 2, 31, 9))) * 3
if sys.argv[1] == "text":
    n = int(sys.argv[3])
    with open(sys.argv[2], "w") as f:
        f.write((worst * (n // len(worst) + 1))[:n])
else:
    os.makedirs(sys.argv[2], exist_ok=True)
    for i in range(int(sys.argv[3])):
        open(os.path.join(sys.argv[2], f"{i:04d}" + worst * 10), "w").close()
"""
WORST_TEXT = '"\\' + "".join(map(chr, (1, 2, 31, 9))) * 3


@dataclass
class Rig:
    served: Served
    api: httpx2.Client
    schema: dict[str, Any]
    github: GitServer
    sizes: dict[str, int] = field(default_factory=dict)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    tmp = tmp_path_factory.mktemp("actions")
    github = GitServer(root=tmp / "github", username="x-access-token", token="ghs_" + "0" * 36)
    github.start()
    github.create_repo(HELLO_REPO, HELLO_BRANCHES)
    # GitHub's API for the pull request, taking the same static token as git.
    api_fake = FakeGitHub(github)
    api_fake.static_token = github.token
    api_fake.add_repo(HELLO_REPO)
    api_fake.start()
    env = {
        **github.gateway_env,
        "MODAL_WORKSPACE_HOST_PORTS": str(github.port),
        "MODAL_WORKSPACE_GITHUB_API_URL": api_fake.api_url,
    }
    with contextlib.ExitStack() as stack:
        backend = stack.enter_context(local_backend(tmp, github.token))
        served = stack.enter_context(serve(tmp, github.token, backend, github_env=env))
        headers = {"Authorization": f"Bearer {TOKEN}"}
        api = stack.enter_context(httpx2.Client(base_url=served.api, headers=headers, timeout=120))
        schema = httpx2.get(f"{served.base_url}/action-openapi.json", timeout=30).json()
        try:
            yield Rig(served, api, schema, github)
        finally:
            api_fake.stop()
            github.stop()


def call(rig: Rig, name: str, method: str, url: str, /, **args: Any) -> Any:
    """One call, held to both limits; answers the JSON."""
    kwargs: dict[str, Any] = {"params": args} if method in ("GET", "DELETE") else {"json": args}
    started = time.monotonic()
    response = rig.api.request(method, url, **kwargs)
    elapsed = time.monotonic() - started
    assert response.status_code == 200, (name, response.text[:500])
    rig.sizes[name] = max(rig.sizes.get(name, 0), len(response.text))
    assert len(response.text) < ACTIONS_CHARS, (name, len(response.text))
    assert elapsed < ACTIONS_SECONDS, (name, elapsed)
    return response.json()


def maxima(rig: Rig, method: str, path: str) -> dict[str, Any]:
    """The largest value the Actions schema allows for every numeric argument of a route."""
    paths = rig.schema["paths"]
    operation = paths.get(f"/api{path}", paths.get(path, {}))[method.lower()]
    properties: dict[str, Any] = {}
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "query":
            properties[parameter["name"]] = parameter["schema"]
    body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
    ref = body.get("schema", {}).get("$ref")
    if ref:
        component = rig.schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
        properties.update(component.get("properties", {}))
    out: dict[str, Any] = {}
    for name, spec in properties.items():
        for branch in [spec, *spec.get("anyOf", [])]:
            if "maximum" in branch:
                out[name] = branch["maximum"]
                break
    return out


def sh(rig: Rig, ws: str, command: str) -> None:
    done = rig.api.post(f"/workspaces/{ws}/exec", json={"command": command, "timeout_seconds": 600})
    assert done.status_code == 200 and done.json()["returncode"] == 0, done.text[:2000]


def test_every_actions_operation_fits_at_its_largest_arguments(rig: Rig) -> None:
    big = "x" * 256
    tags = {f"t{i:02d}": '"' * 256 for i in range(32)}

    def route(name: str, method: str, url: str, /, **args: Any) -> Any:
        template = url.replace(ws_path, "/workspaces/{workspace_id}")
        template = re.sub(r"/streams/[^/]+/", "/streams/{stream_id}/", template)
        for key, value in ids.items():
            template = template.replace(value, "{" + key + "}")
        return call(rig, name, method, url, **{**maxima(rig, method, template), **args})

    created = call(rig, "workspace_create", "POST", "/workspaces", tags=tags)
    ws = created["workspace_id"]
    ws_path = f"/workspaces/{ws}"
    ids: dict[str, str] = {}
    for _ in range(3):  # more workspaces with the most tags: the list must still fit
        call(rig, "workspace_create", "POST", "/workspaces", tags=tags, block_network=True)
    route("workspace_list", "GET", "/workspaces")
    route("workspace_get", "GET", ws_path)

    # Worst content: a text file of escapes, a binary file, a repository with a huge diff and
    # thousands of untracked files with long names that JSON must escape.
    assert rig.api.put(
        f"{ws_path}/files/content", json={"path": "gen.py", "content": GENERATOR}
    ).is_success
    sh(rig, ws, "python3 gen.py text worst.txt 9000000 && python3 gen.py names many 3000")
    sh(rig, ws, "head -c 9000000 /dev/urandom > blob.bin")
    route("workspace_exec", "POST", f"{ws_path}/exec", command="cat worst.txt; cat worst.txt >&2")
    route("file_read", "GET", f"{ws_path}/files/content", path="worst.txt")
    route("file_read", "GET", f"{ws_path}/files/content", path="blob.bin")
    route("file_list", "GET", f"{ws_path}/files", path="many")
    # The listing of a download, as Actions get it: cut to fit, with its link.
    listed = route(
        "artifact_download",
        "GET",
        f"{ws_path}/artifacts",
        path="many",
        listing=True,
        max_entries=1000,
    )
    assert listed["truncated"] and listed["download_url"].startswith("http")
    route("file_search", "GET", f"{ws_path}/files/search", pattern="\\\\", path=".")
    route("file_search", "GET", f"{ws_path}/files/search", pattern="*", mode="name")

    clone = route(
        "repo_clone", "POST", f"{ws_path}/repo/clone", repository=HELLO_REPO, use_github_token=True
    )
    ids["exec_id"] = clone["exec_id"]
    # GPT Actions reads every stream through stream_events (the per-kind reads are not there).
    events = f"{ws_path}/streams/{clone['exec_id']}/events"
    cursor = 0
    while True:  # the cursor loop at its largest page
        page = route("stream_events", "GET", events, cursor=cursor)
        cursor = page["next_cursor"]
        if page["done"]:
            break
    fetched = route(
        "repo_fetch", "POST", f"{ws_path}/repo/fetch", destination="hello", use_github_token=True
    )
    route("repo_checkout", "POST", f"{ws_path}/repo/checkout", destination="hello", ref="feature")
    # A committed file rewritten whole (one line of escapes), and thousands of untracked files.
    sh(
        rig,
        ws,
        "python3 gen.py text hello/big.txt 3000000 && git -C hello add big.txt && "
        "git -C hello -c user.name=t -c user.email=t@t commit -qm big && "
        "python3 gen.py text hello/big.txt 2999999 && python3 gen.py names hello/new 3000",
    )
    route("repo_status", "GET", f"{ws_path}/repo/status", destination="hello")
    route("repo_diff", "GET", f"{ws_path}/repo/diff", destination="hello")
    # The thousands of long names committed, pushed and offered for review at the largest
    # message, title and body.
    message = '"\\\t\n' * 16_384  # 64 KiB, every character escaped in JSON
    route("repo_commit", "POST", f"{ws_path}/repo/commit", destination="hello", message=message)
    pushed = route("repo_push", "POST", f"{ws_path}/repo/push", destination="hello")
    assert pushed["pushed"] and pushed["truncated"], pushed["error"]
    route(
        "repo_pull_request",
        "POST",
        f"{ws_path}/repo/pull-request",
        destination="hello",
        title="x" * 256,
        body='"' * 65_536,
    )

    # A realtime exec whose output is the worst text, read page by page at the largest page.
    started = route(
        "workspace_realtime_exec_start",
        "POST",
        f"{ws_path}/realtime-execs",
        command="cat worst.txt; sleep 1",
    )
    ids["exec_id"] = started["exec_id"]
    ex = f"{ws_path}/realtime-execs/{started['exec_id']}"
    route("workspace_realtime_exec_input", "POST", f"{ex}/input", data=big)
    route("workspace_realtime_exec_status", "GET", ex)
    cursor, pages = 0, 0
    any_stream = f"{ws_path}/streams/{started['exec_id']}/events"
    while True:
        page = route("stream_events", "GET", any_stream, cursor=cursor)
        cursor, pages = page["next_cursor"], pages + 1
        if page["done"]:
            break
    assert pages > 10  # the output came in many pages, each within the limit
    route("workspace_realtime_exec_cancel", "POST", f"{ex}/cancel")

    route("file_write", "PUT", f"{ws_path}/files/content", path="w.txt", content=WORST_TEXT * 1000)
    route(
        "file_edit",
        "POST",
        f"{ws_path}/files/edit",
        path="w.txt",
        old="\x01",
        new="\x02",
        expected_replacements=3000,
    )
    route("file_remove", "DELETE", f"{ws_path}/files", path="many", recursive=True)

    # Snapshots, a fork and a resume of this workspace, with the longest label.
    label = "x" * 64
    snapshot = route("workspace_snapshot", "POST", f"{ws_path}/snapshots", label=label)
    ids["snapshot_id"] = snapshot["snapshot_id"]
    for _ in range(10):  # more snapshots: their list still fits
        call(rig, "workspace_snapshot", "POST", f"{ws_path}/snapshots", label=label)
    route("workspace_snapshot_list", "GET", f"{ws_path}/snapshots")
    fork = route("workspace_fork", "POST", f"{ws_path}/fork", snapshot_id=snapshot["snapshot_id"])
    call(rig, "workspace_terminate", "DELETE", f"/workspaces/{fork['workspace_id']}")
    route("workspace_resume", "POST", f"{ws_path}/resume", snapshot_id=snapshot["snapshot_id"])
    route("workspace_snapshot_delete", "DELETE", f"{ws_path}/snapshots/{snapshot['snapshot_id']}")
    route("workspace_terminate", "DELETE", ws_path)

    # Every operation of the schema was called (its name recorded by `call`).
    called = set(rig.sizes)
    named = {
        op.get("operationId", "")
        for item in rig.schema["paths"].values()
        for op in item.values()
        if isinstance(op, dict)
    }
    missing = [n for n in named if not any(n.startswith(c) for c in called)]
    assert not missing, missing
    assert fetched["exec_id"]
    # The bulky answers were cut to fit, not left small by accident.
    bulky = ("file_read", "workspace_exec", "repo_diff", "file_list", "workspace_list")
    for name in (*bulky, "repo_commit", "repo_push", "artifact_download"):
        assert rig.sizes[name] > ACTIONS_CHARS // 2, (name, rig.sizes[name])


def test_a_command_longer_than_the_wait_answers_running_and_goes_on(rig: Rig) -> None:
    ws = call(rig, "workspace_create", "POST", "/workspaces", block_network=True)["workspace_id"]
    body = {"command": "echo begun; sleep 4; echo ended", "wait_seconds": 1}
    answered = call(rig, "workspace_exec", "POST", f"/workspaces/{ws}/exec", **body)
    assert answered["state"] in ("running", "starting"), answered
    assert answered["returncode"] is None and answered["stdout"] in ("", "begun\n")
    # The command was not killed because the caller stopped waiting: its events say how it ended.
    ex = f"/workspaces/{ws}/realtime-execs/{answered['exec_id']}"
    cursor, out = 0, ""
    while True:
        page = call(rig, "events", "GET", f"{ex}/events", cursor=cursor, wait_seconds=10)
        out += "".join(e.get("data", "") for e in page["events"] if e["type"] == "stdout")
        cursor = page["next_cursor"]
        if page["done"]:
            break
    assert out == "begun\nended\n" and page["returncode"] == 0
    # GPT Actions may not wait longer than its limit allows.
    refused = rig.api.post(f"/workspaces/{ws}/exec", json={"command": "true", "wait_seconds": 31})
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "wait_seconds"


def test_a_command_that_cannot_start_says_why(rig: Rig) -> None:
    ws = call(rig, "workspace_create", "POST", "/workspaces", block_network=True)["workspace_id"]
    body = {"command": "true", "workdir": "no/such/dir"}
    failed = call(rig, "workspace_exec", "POST", f"/workspaces/{ws}/exec", **body)
    assert failed["state"] == "failed" and failed["returncode"] is None
    assert "no/such/dir" in (failed["error"] or "") or "No such file" in (failed["error"] or "")
    status = call(rig, "status", "GET", f"/workspaces/{ws}/realtime-execs/{failed['exec_id']}")
    assert status["error"] == failed["error"]
