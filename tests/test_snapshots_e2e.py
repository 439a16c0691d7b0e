"""Snapshots, resume and fork end to end over real HTTP: `modal-workspace serve` with the real
agent, on the local driver and on the Modal driver (the real SDK against the test control
plane), a repository cloned over smart HTTP. The same tests on every backend."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from e2e_support import Served, api_client, backend_for, ok, serve
from support.git_server import GitServer

pytest.importorskip("modal_workspace_core.drivers.local.driver")


@pytest.fixture(params=["local", "modal"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path, git_server: GitServer
) -> Iterator[Served]:
    with contextlib.ExitStack() as stack:
        backend = stack.enter_context(backend_for(request.param, tmp_path, git_server.token))
        yield stack.enter_context(
            serve(tmp_path, git_server.token, backend, github_env=git_server.gateway_env)
        )


@pytest.fixture
def api(served: Served) -> Iterator[httpx2.Client]:
    with api_client(served) as client:
        yield client


def sh(api: httpx2.Client, ws: str, command: str) -> dict[str, Any]:
    done = ok(api.post(f"/workspaces/{ws}/exec", json={"command": command}))
    assert done["returncode"] == 0, done
    return done


def cloned(api: httpx2.Client) -> str:
    """A workspace with octo/hello cloned into /workspace/hello, its repo tags recorded."""
    ws = ok(api.post("/workspaces", json={"tags": {"team": "qa"}}))["workspace_id"]
    clone = ok(
        api.post(
            f"/workspaces/{ws}/repo/clone",
            json={"repository": "octo/hello", "use_github_token": True},
        )
    )
    deadline = time.monotonic() + 60
    while "repo-path" not in ok(api.get(f"/workspaces/{ws}"))["tags"]:
        assert time.monotonic() < deadline, f"the clone {clone['exec_id']} was not recorded"
        time.sleep(0.2)
    return ws


def diff(api: httpx2.Client, ws: str) -> str:
    return str(ok(api.get(f"/workspaces/{ws}/repo/diff"))["diff"])


def test_forks_of_one_snapshot_are_independent_and_know_their_lineage(api: httpx2.Client) -> None:
    parent = cloned(api)
    head = sh(api, parent, "git -C hello rev-parse HEAD")["stdout"].strip()
    snap = ok(api.post(f"/workspaces/{parent}/snapshots", json={"label": "before the change"}))
    assert snap["snapshot_id"].startswith("sn-") and snap["kind"] == "manual"
    assert snap["label"] == "before the change" and snap["expires_at"] is None
    assert snap["repos"] == {"/workspace/hello": head}
    assert [
        s["snapshot_id"] for s in ok(api.get(f"/workspaces/{parent}/snapshots"))["snapshots"]
    ] == [snap["snapshot_id"]]

    one = ok(api.post(f"/workspaces/{parent}/fork", json={"snapshot_id": snap["snapshot_id"]}))
    two = ok(api.post(f"/workspaces/{parent}/fork", json={"snapshot_id": snap["snapshot_id"]}))
    assert len({parent, one["workspace_id"], two["workspace_id"]}) == 3
    sh(api, one["workspace_id"], "echo one >> hello/README.md")
    sh(api, two["workspace_id"], "echo two > hello/TWO.md")

    first, second = diff(api, one["workspace_id"]), diff(api, two["workspace_id"])
    assert "+one" in first and "TWO.md" not in first
    assert "TWO.md" in second and "+one" not in second
    assert diff(api, parent) == ""  # the parent is untouched
    for fork in (one, two):
        got = ok(api.get(f"/workspaces/{fork['workspace_id']}"))
        lineage = got["lineage"]
        assert lineage["parent_workspace_id"] == parent
        assert lineage["snapshot_id"] == snap["snapshot_id"]
        assert lineage["repos"] == {"/workspace/hello": head}
        assert got["tags"]["repo-path"] == "/workspace/hello" and got["tags"]["team"] == "qa"
        # A fork starts with no exec history of its own: none of the parent's execs is its.
        assert all(
            e["exec_id"] not in {x["exec_id"] for x in _execs(api, parent)}
            for e in _execs(api, fork["workspace_id"])
        )
    assert ok(api.get(f"/workspaces/{parent}"))["lineage"] is None


def _execs(api: httpx2.Client, ws: str) -> list[dict[str, Any]]:
    return list(ok(api.get(f"/workspaces/{ws}/realtime-execs"))["execs"])


def test_fork_without_a_snapshot_takes_one_and_an_idempotency_key_answers_the_same_fork(
    api: httpx2.Client,
) -> None:
    parent = ok(api.post("/workspaces", json={}))["workspace_id"]
    sh(api, parent, "echo kept > a.txt")
    fork = ok(api.post(f"/workspaces/{parent}/fork", json={"idempotency_key": "f1"}))
    again = ok(api.post(f"/workspaces/{parent}/fork", json={"idempotency_key": "f1"}))
    assert again["workspace_id"] == fork["workspace_id"]
    assert sh(api, fork["workspace_id"], "cat a.txt")["stdout"] == "kept\n"
    snapshots = ok(api.get(f"/workspaces/{parent}/snapshots"))["snapshots"]
    assert [s["snapshot_id"] for s in snapshots] == [fork["lineage"]["snapshot_id"]]


def test_resume_after_terminate_keeps_files_tags_and_exec_logs_and_a_running_exec_is_lost(
    api: httpx2.Client,
) -> None:
    ws = cloned(api)
    sh(api, ws, "echo work in progress > hello/WIP.md")
    printed = sh(api, ws, "echo the log of an exec")
    running = ok(api.post(f"/workspaces/{ws}/realtime-execs", json={"command": "sleep 600"}))
    ended = ok(api.request("DELETE", f"/workspaces/{ws}", params={"keep_snapshot": True}))
    assert ended["terminated"] and ended["snapshot_id"].startswith("sn-")
    assert api.get(f"/workspaces/{ws}").status_code == 404
    kinds = {s["kind"] for s in ok(api.get(f"/workspaces/{ws}/snapshots"))["snapshots"]}
    assert kinds == {"exit"}

    resumed = ok(api.post(f"/workspaces/{ws}/resume", json={}))
    assert resumed["workspace_id"] == ws and resumed["state"] == "running"
    assert resumed["resumed_from"] == ended["snapshot_id"]
    assert resumed["tags"]["repo-path"] == "/workspace/hello" and resumed["tags"]["team"] == "qa"
    assert sh(api, ws, "cat hello/WIP.md")["stdout"] == "work in progress\n"
    assert "WIP.md" in ok(api.get(f"/workspaces/{ws}/repo/status"))["entries"][0]["path"]
    # Its exec history came with it: the finished exec's log reads back, the running one is lost.
    log = ok(api.get(f"/workspaces/{ws}/realtime-execs/{printed['exec_id']}/events"))
    assert "the log of an exec" in json.dumps(log["events"])
    status = ok(api.get(f"/workspaces/{ws}/realtime-execs/{running['exec_id']}"))
    assert status["state"] == "lost", status


def test_a_deleted_or_expired_snapshot_is_refused_by_name_and_nothing_is_created(
    api: httpx2.Client, served: Served
) -> None:
    ws = ok(api.post("/workspaces", json={}))["workspace_id"]
    snap = ok(api.post(f"/workspaces/{ws}/snapshots", json={"ttl_seconds": 3600}))
    assert snap["expires_at"] is not None and not snap["expired"]
    before = {w["workspace_id"] for w in ok(api.get("/workspaces"))["workspaces"]}

    expire(served, ws, snap["snapshot_id"])
    if served.backend.plane is None:
        # The local driver keeps the expiry itself; on Modal the image has expired at Modal,
        # which the gateway learns when it tries to open it.
        listed = ok(api.get(f"/workspaces/{ws}/snapshots"))["snapshots"]
        assert [s["expired"] for s in listed] == [True]
    for route in ("resume", "fork"):
        refused = api.post(f"/workspaces/{ws}/{route}", json={"snapshot_id": snap["snapshot_id"]})
        assert refused.status_code == 409, refused.text
        assert snap["snapshot_id"] in refused.json()["error"]["message"]
    assert {w["workspace_id"] for w in ok(api.get("/workspaces"))["workspaces"]} == before

    gone = ok(api.post(f"/workspaces/{ws}/snapshots", json={}))
    deleted = api.delete(f"/workspaces/{ws}/snapshots/{gone['snapshot_id']}")
    assert ok(deleted)["deleted"]
    for route in ("resume", "fork"):
        refused = api.post(f"/workspaces/{ws}/{route}", json={"snapshot_id": gone["snapshot_id"]})
        assert refused.status_code == 404, refused.text
        assert gone["snapshot_id"] in refused.json()["error"]["message"]
    again = api.delete(f"/workspaces/{ws}/snapshots/{gone['snapshot_id']}")
    assert again.status_code == 404
    assert {w["workspace_id"] for w in ok(api.get("/workspaces"))["workspaces"]} == before


def test_a_snapshot_not_taken_in_time_answers_taking_and_its_stream_ends_with_it(
    api: httpx2.Client,
) -> None:
    ws = ok(api.post("/workspaces", json={}))["workspace_id"]
    sh(api, ws, "head -c 50000000 /dev/urandom > big.bin")
    # wait_seconds=0: the call answers before the snapshot exists, as a Modal snapshot longer
    # than GPT Actions' 45 s would.
    taking = ok(api.post(f"/workspaces/{ws}/snapshots", json={"label": "big", "wait_seconds": 0}))
    assert taking["state"] == "taking", taking
    stream = taking["progress_stream_id"]
    assert stream.startswith("tk-") and taking["label"] == "big"

    events: list[dict[str, Any]] = []
    cursor, deadline = 0, time.monotonic() + 120
    while True:
        page = ok(
            api.get(
                f"/workspaces/{ws}/streams/{stream}/events",
                params={"cursor": cursor, "wait_seconds": 10},
            )
        )
        events += page["events"]
        cursor = page["next_cursor"]
        if page["done"]:
            break
        assert time.monotonic() < deadline, events
    assert page["state"] == "finished" and page["returncode"] == 0, page
    assert events[0]["type"] == "status" and events[0]["state"] == "running"
    assert events[0]["snapshot_id"] == taking["snapshot_id"]
    progress = [e for e in events if e["type"] == "progress"]
    done = [e["done"] for e in progress if "done" in e]
    assert done and done == sorted(done), progress
    exit_event = next(e for e in events if e["type"] == "exit")
    result = exit_event["result"]
    assert result["snapshot_id"] == taking["snapshot_id"] and result["state"] == "ready"
    if result["size_bytes"] is not None:  # where the driver knows the size, progress ends at it
        assert result["size_bytes"] >= 50_000_000 and done[-1] == result["size_bytes"]

    listed = ok(api.get(f"/workspaces/{ws}/snapshots"))["snapshots"]
    assert [s["snapshot_id"] for s in listed] == [taking["snapshot_id"]]
    fork = ok(api.post(f"/workspaces/{ws}/fork", json={"snapshot_id": taking["snapshot_id"]}))
    assert sh(api, fork["workspace_id"], "stat -c %s big.bin")["stdout"] == "50000000\n"


def test_a_second_snapshot_while_one_is_taken_is_refused(
    api: httpx2.Client, served: Served
) -> None:
    plane = served.backend.plane
    if plane is None:
        pytest.skip("needs a snapshot slow on purpose: the control plane's delay fault")
    ws = ok(api.post("/workspaces", json={}))["workspace_id"]
    plane.snapshot_faults(delay=3)
    first = ok(api.post(f"/workspaces/{ws}/snapshots", json={"wait_seconds": 0}))
    assert first["state"] == "taking"
    second = api.post(f"/workspaces/{ws}/snapshots", json={})
    assert second.status_code == 409, second.text
    assert "being taken" in second.json()["error"]["message"]
    plane.snapshot_faults()
    # Once the first is taken, the next one is.
    deadline = time.monotonic() + 60
    while not ok(api.get(f"/workspaces/{ws}/snapshots"))["snapshots"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert ok(api.post(f"/workspaces/{ws}/snapshots", json={}))["state"] == "ready"


def expire(served: Served, workspace_id: str, snapshot_id: str) -> None:
    """Time passes for one snapshot: its expiry moves into the past where its driver keeps it
    (the local data root's record; the control plane's snapshot image)."""
    plane = served.backend.plane
    if plane is not None:
        plane.expire_snapshots()
        return
    record = served.data_root / "snapshots" / workspace_id / snapshot_id / "record.json"
    data = json.loads(record.read_text())
    data["expires_at"] = "2000-01-01T00:00:00Z"
    record.write_text(json.dumps(data))
