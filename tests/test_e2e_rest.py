"""End to end over real HTTP: `modal-workspace serve` on 127.0.0.1 with the real agent, on the
local driver and on the Modal driver (the real SDK against the test control plane); a workspace
is created, a repository cloned with a token over smart HTTP, commands run with stdin and cancel,
events drained to `done`, files edited, the diff read, and the workspace terminated — all
through the REST API, the same test on every backend."""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from e2e_support import (
    BACKENDS,
    Served,
    api_client,
    backend_for,
    local_backend,
    ok,
    serve,
    workspace_files_containing,
)
from service_support import TOKEN
from support.git_server import ArgvSampler, GitServer

pytest.importorskip("modal_workspace_core.drivers.local.driver")


@pytest.fixture(params=["local", "local-unisolated", "modal"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path, git_server: GitServer
) -> Iterator[Served]:
    token = git_server.token
    with contextlib.ExitStack() as stack:
        if request.param == "local-unisolated":  # the fallback without bubblewrap, paths and all
            backend = stack.enter_context(local_backend(tmp_path, token, isolation="none"))
        else:
            backend = stack.enter_context(backend_for(request.param, tmp_path, token))
        yield stack.enter_context(
            serve(tmp_path, token, backend, github_env=git_server.gateway_env)
        )


@pytest.fixture
def api(served: Served) -> Iterator[httpx2.Client]:
    with api_client(served) as client:
        yield client


def drain(
    api: httpx2.Client, ws: str, exec_id: str, *, route: str = "realtime-execs", **params: Any
) -> tuple[list[dict], dict]:
    """Follows an exec's events with the cursor loop until `done` (through its own read, or
    `route="streams"`, the read of any stream); returns them and the last page. Asserts that
    the seqs run 1, 2, 3, … with nothing missing."""
    cursor, events, deadline = 0, [], time.monotonic() + 180
    while True:
        answer = api.get(
            f"/workspaces/{ws}/{route}/{exec_id}/events",
            params={"cursor": cursor, "wait_seconds": 10, **params},
        )
        page = ok(answer)
        # Each page within the budget it was asked for.
        assert len(answer.content) <= params.get("max_bytes", 48_000), len(answer.content)
        assert not page["cursor_expired"]
        events += page["events"]
        cursor = page["next_cursor"]
        if page["done"]:
            break
        assert time.monotonic() < deadline, "the exec did not end"
    seqs = [e.get("seq_start", e["seq"]) for e in events]
    assert seqs == list(range(1, len(events) + 1)), "events are missing or out of order"
    kinds = [e["type"] for e in events]
    assert "exit" in kinds and set(kinds[kinds.index("exit") + 1 :]) <= {"status"}
    return events, page


def output(events: list[dict], kind: str = "stdout") -> str:
    data = b""
    for e in events:
        if e["type"] == kind:
            data += base64.b64decode(e["data_b64"]) if "data_b64" in e else e["data"].encode()
    return data.decode()


def test_the_whole_job_through_rest(
    served: Served, api: httpx2.Client, git_server: GitServer, request: pytest.FixtureRequest
) -> None:
    token = served.github_token
    # Create, idempotently.
    created = ok(api.post("/workspaces", json={"idempotency_key": "e2e", "tags": {"team": "qa"}}))
    ws = created["workspace_id"]
    again = ok(api.post("/workspaces", json={"idempotency_key": "e2e"}))
    assert again["workspace_id"] == ws
    assert created["tags"]["team"] == "qa" and created["state"] == "running"
    # Every path a result names is one its commands can open: under /workspace, or under the
    # host directory an unisolated workspace runs its commands in (and reports as its root).
    root = created["root"]
    unisolated = request.node.callspec.params["served"] == "local-unisolated"
    assert (root == "/workspace") != unisolated, root
    assert [w["workspace_id"] for w in ok(api.get("/workspaces"))["workspaces"]] == [ws]

    # Clone with the token: it reaches the server, and nowhere else.
    with ArgvSampler(token) as sampler:
        clone = ok(
            api.post(
                f"/workspaces/{ws}/repo/clone",
                json={"repository": "octo/hello", "ref": "feature", "use_github_token": True},
            )
        )
        events, last = drain(api, ws, clone["exec_id"])
    assert clone["destination"] == f"{root}/hello"
    assert last["state"] == "finished" and last["returncode"] == 0, output(events, "stderr")
    assert "Cloning into" in output(events, "stderr")
    assert token in git_server.passwords
    assert all(token not in r.path for r in git_server.requests)  # never in a URL
    assert sampler.git_seen > 0 and sampler.leaks == []
    assert all(token not in str(e) for e in events)
    assert workspace_files_containing(served.files_root, token) == []
    assert token not in served.log_text()
    # Ordinary commands do not have it either (on Modal the sandbox holds it, privately).
    env_check = {"command": "printenv GH_TOKEN MWC_GIT_TOKEN; echo $?"}
    assert ok(api.post(f"/workspaces/{ws}/exec", json=env_check))["stdout"] == "1\n"
    # The repo tags are recorded once the clone has succeeded.
    deadline = time.monotonic() + 30
    while "repo-url" not in (tags := ok(api.get(f"/workspaces/{ws}"))["tags"]):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert tags["repo-url"] == "https://github.com/octo/hello.git"
    assert tags["repo-path"] == f"{root}/hello" and tags["repo-ref"] == "feature"
    # The gateway kept its bookkeeping with the agent, never in the workspace's files.
    assert api.get(f"/workspaces/{ws}/files", params={"path": ".mwc"}).status_code == 404

    # A realtime exec with stdin.
    cat = ok(api.post(f"/workspaces/{ws}/realtime-execs", json={"command": "cat; echo done"}))
    exec_url = f"/workspaces/{ws}/realtime-execs/{cat['exec_id']}"
    assert ok(api.post(f"{exec_url}/input", json={"data": "hello\n"}))["accepted"] == 6
    raw = base64.b64encode(b"bytes\n").decode()
    ok(api.post(f"{exec_url}/input", json={"data": raw, "encoding": "base64", "eof": True}))
    events, last = drain(api, ws, cat["exec_id"])
    assert output(events) == "hello\nbytes\ndone\n"
    assert ok(api.get(exec_url))["returncode"] == 0

    # Cancel a command that would run for ten minutes.
    sleeper = ok(api.post(f"/workspaces/{ws}/realtime-execs", json={"command": "sleep 600"}))
    sleep_url = f"/workspaces/{ws}/realtime-execs/{sleeper['exec_id']}"
    # The reply waits for the end: the exec is cancelled, not "running".
    cancelled = ok(api.post(f"{sleep_url}/cancel", json={"grace_seconds": 1}))
    assert cancelled["state"] == "cancelled", cancelled
    events, last = drain(api, ws, sleeper["exec_id"])
    assert last["state"] == "cancelled"
    listed = ok(api.get(f"/workspaces/{ws}/realtime-execs"))["execs"]
    assert {cat["exec_id"], sleeper["exec_id"], clone["exec_id"]} <= {e["exec_id"] for e in listed}

    # The same idempotency key answers the exec it started.
    first = ok(
        api.post(
            f"/workspaces/{ws}/realtime-execs", json={"command": "true", "idempotency_key": "k1"}
        )
    )
    second = ok(
        api.post(
            f"/workspaces/{ws}/realtime-execs", json={"command": "true", "idempotency_key": "k1"}
        )
    )
    assert first["exec_id"] == second["exec_id"]

    # Many small pages: every line arrives, in order, each page within its budget.
    lines = ok(api.post(f"/workspaces/{ws}/realtime-execs", json={"command": "seq 1 30000"}))
    events, _ = drain(api, ws, lines["exec_id"], max_bytes=32_768, max_events=50)
    assert output(events) == "".join(f"{i}\n" for i in range(1, 30001))

    # Files.
    base = f"/workspaces/{ws}/files"
    ok(api.put(f"{base}/content", json={"path": "hello/src/hello.py", "content": "print('hi')\n"}))
    edited = ok(
        api.post(
            f"{base}/edit", json={"path": "hello/src/hello.py", "old": "hi", "new": "hello, world"}
        )
    )
    assert edited["replacements"] == 1
    read = ok(api.get(f"{base}/content", params={"path": "/workspace/hello/src/hello.py"}))
    assert read["content"] == "print('hello, world')\n" and read["eof"]
    assert read["path"] == f"{root}/hello/src/hello.py"
    # The path as reported is taken back as the same file, and commands open it.
    again = ok(api.get(f"{base}/content", params={"path": read["path"]}))
    assert again["content"] == read["content"]
    shown = ok(api.post(f"/workspaces/{ws}/exec", json={"command": f"cat {read['path']}"}))
    assert shown["stdout"] == read["content"], shown
    outside = api.get(f"{base}/content", params={"path": f"{root}/../../etc/passwd"})
    assert outside.status_code == 400, outside.text
    ok(api.put(f"{base}/content", json={"path": "hello/NOTES.md", "content": "new file\n"}))
    listing = ok(api.get(base, params={"path": "hello/src"}))
    assert listing["path"] == f"{root}/hello/src"
    assert {e["path"] for e in listing["entries"]} >= {
        f"{root}/hello/src/hello.py",
        f"{root}/hello/src/feature.py",
    }
    found = ok(api.get(f"{base}/search", params={"pattern": "FEATURE", "path": "hello"}))
    assert [h["path"] for h in found["hits"]] == [f"{root}/hello/src/feature.py"]
    ok(api.put(f"{base}/content", json={"path": "scratch/tmp.txt", "content": "x"}))
    assert (
        ok(api.request("DELETE", base, params={"path": "scratch", "recursive": True}))["removed"]
        >= 1
    )

    # Status and diff: the edit, and the untracked file shown as new.
    status = ok(api.get(f"/workspaces/{ws}/repo/status", params={"destination": "hello"}))
    assert status["branch"] == "feature" and not status["clean"]
    paths = {e["path"]: e for e in status["entries"]}
    assert paths["src/hello.py"]["worktree"] == "M" and paths["NOTES.md"]["index"] == "?"
    diff = ok(api.get(f"/workspaces/{ws}/repo/diff", params={"destination": "hello"}))
    assert "+print('hello, world')" in diff["diff"] and "+new file" in diff["diff"]
    assert not diff["truncated"]
    small = ok(
        api.get(
            f"/workspaces/{ws}/repo/diff",
            params={"destination": "hello", "max_bytes": 1024, "stat": True},
        )
    )
    assert "NOTES.md" in small["diff"]

    # Checkout another branch (the local changes do not touch it).
    ok(api.post(f"/workspaces/{ws}/exec", json={"command": "git stash -u", "workdir": "hello"}))
    checkout = ok(
        api.post(f"/workspaces/{ws}/repo/checkout", json={"destination": "hello", "ref": "main"})
    )
    _, last = drain(api, ws, checkout["exec_id"])
    assert last["returncode"] == 0

    # Run to completion: exit code, output and a timeout.
    run = ok(
        api.post(
            f"/workspaces/{ws}/exec",
            json={"command": "echo out; echo err >&2; exit 3", "stdin": ""},
        )
    )
    assert (run["stdout"], run["stderr"], run["returncode"]) == ("out\n", "err\n", 3)
    slow = ok(
        api.post(f"/workspaces/{ws}/exec", json={"command": "sleep 30", "timeout_seconds": 1})
    )
    assert slow["timed_out"] and slow["state"] == "timed_out"

    # Terminate: gone afterwards.
    assert ok(api.delete(f"/workspaces/{ws}"))["terminated"] is True
    missing = api.get(f"/workspaces/{ws}")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


def test_one_read_follows_any_stream_as_its_own_read_does(api: httpx2.Client) -> None:
    ws = ok(api.post("/workspaces", json={}))["workspace_id"]
    try:
        started = ok(
            api.post(f"/workspaces/{ws}/realtime-execs", json={"command": "seq 1 5000; exit 3"})
        )
        own, own_last = drain(api, ws, started["exec_id"])
        anyway, any_last = drain(api, ws, started["exec_id"], route="streams", max_bytes=32_768)
        assert output(anyway) == output(own) == "".join(f"{i}\n" for i in range(1, 5001))
        # The same exit; a final status written after the first read ended with the exit is
        # there for the later one too.
        exits = [[e for e in events if e["type"] == "exit"] for events in (own, anyway)]
        assert exits[0] == exits[1] and len(exits[0]) == 1
        assert anyway[-1]["seq"] >= own[-1]["seq"]
        assert (any_last["state"], any_last["returncode"]) == ("finished", 3)
        assert (own_last["state"], own_last["returncode"]) == ("finished", 3)

        watch = ok(api.post(f"/workspaces/{ws}/file-watches", json={"path": "."}))
        streams = f"/workspaces/{ws}/streams/{watch['watch_id']}/events"
        ok(api.put(f"/workspaces/{ws}/files/content", json={"path": "w.txt", "content": "x"}))
        deadline, seen = time.monotonic() + 30, []
        while not any(e.get("path") == "w.txt" for e in seen):
            assert time.monotonic() < deadline, seen
            page = ok(api.get(streams, params={"cursor": 0, "wait_seconds": 5}))
            seen = page["events"]
        assert (page["state"], page["returncode"], page["done"]) == ("watching", None, False)

        for bad in ("ws-" + "0" * 32, "ex-0", "sn-" + "0" * 32, "x" * 40):
            refused = api.get(f"/workspaces/{ws}/streams/{bad}/events")
            assert refused.status_code == 400, (bad, refused.text)
            assert refused.json()["error"]["field"] == "stream_id", refused.text
        missing = api.get(f"/workspaces/{ws}/streams/ex-{'0' * 32}/events")
        assert missing.status_code == 404, missing.text
    finally:
        ok(api.delete(f"/workspaces/{ws}"))


@pytest.mark.parametrize("driver", BACKENDS)
def test_workspaces_and_their_exec_logs_survive_a_server_restart(
    tmp_path: Path, git_server: GitServer, driver: str
) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    token = git_server.token
    with backend_for(driver, tmp_path, token) as backend:
        with (
            serve(tmp_path, token, backend, terminate_all=False) as first,
            httpx2.Client(base_url=first.api, headers=headers, timeout=120) as api,
        ):
            ws = ok(api.post("/workspaces", json={"tags": {"keep": "yes"}}))["workspace_id"]
            ran = ok(api.post(f"/workspaces/{ws}/exec", json={"command": "echo remembered"}))
            # Still running when the server stops: the next server resumes its events.
            command = "echo before; sleep 2; echo after"
            running = ok(api.post(f"/workspaces/{ws}/realtime-execs", json={"command": command}))
        with (
            serve(tmp_path, token, backend) as second,
            httpx2.Client(base_url=second.api, headers=headers, timeout=120) as api,
        ):
            listed = ok(api.get("/workspaces"))["workspaces"]
            assert [(w["workspace_id"], w["tags"]["keep"]) for w in listed] == [(ws, "yes")]
            execs = {e["exec_id"] for e in ok(api.get(f"/workspaces/{ws}/realtime-execs"))["execs"]}
            assert {ran["exec_id"], running["exec_id"]} <= execs
            events, last = drain(api, ws, ran["exec_id"])
            assert output(events) == "remembered\n" and last["returncode"] == 0
            events, last = drain(api, ws, running["exec_id"])
            assert output(events) == "before\nafter\n" and last["returncode"] == 0
            again = ok(api.post(f"/workspaces/{ws}/exec", json={"command": "echo still here"}))
            assert again["stdout"] == "still here\n"
