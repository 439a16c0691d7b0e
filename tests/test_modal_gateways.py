"""Several gateway containers at once (Modal runs as many as the load needs; a GPT Actions
client retries on another after 45 s): what one gateway decides, another agrees with. Two real
server processes on one test control plane, the real `modal` SDK in each."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Served, api_client, modal_backend, ok, serve
from modal_proto import api_pb2

pytest.importorskip("modal_workspace_core.drivers.modal.driver")


@pytest.fixture
def two_gateways(tmp_path: Path) -> Iterator[tuple[Served, Served]]:
    with contextlib.ExitStack() as stack:
        backend = stack.enter_context(modal_backend("ghp_unused"))
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        first = stack.enter_context(serve(tmp_path / "a", "", backend))
        second = stack.enter_context(serve(tmp_path / "b", "", backend, terminate_all=False))
        yield first, second


def at_once(gateways: tuple[Served, ...], path: str, body: dict[str, Any]) -> list[Any]:
    """The same POST to each gateway, released together."""
    start = threading.Barrier(len(gateways))
    answers: list[Any] = [None] * len(gateways)

    def post(i: int, served: Served) -> None:
        with api_client(served) as api:
            start.wait()
            answers[i] = ok(api.post(path, json=body))

    threads = [threading.Thread(target=post, args=(i, g)) for i, g in enumerate(gateways)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return answers


def test_two_gateways_given_one_key_at_once_make_one_workspace(
    two_gateways: tuple[Served, Served],
) -> None:
    first = two_gateways[0]
    plane = first.backend.plane
    assert plane is not None
    made = at_once(two_gateways, "/workspaces", {"idempotency_key": "job-7", "tags": {"t": "1"}})
    ids = {m["workspace_id"] for m in made}
    assert len(ids) == 1, made
    (ws,) = ids
    running = [s for s in plane.sandboxes() if s.name == ws and s.result is None]
    assert len(running) == 1, "one sandbox behind it"
    # Each gateway answers the key with it afterwards, and lists it once.
    for served in two_gateways:
        with api_client(served) as api:
            again = ok(api.post("/workspaces", json={"idempotency_key": "job-7"}))
            assert again["workspace_id"] == ws
            listed = [w["workspace_id"] for w in ok(api.get("/workspaces"))["workspaces"]]
            assert listed.count(ws) == 1

    # Forks of one parent with one key: one fork, whichever gateway is asked.
    forks = at_once(two_gateways, f"/workspaces/{ws}/fork", {"idempotency_key": "try-a"})
    assert len({f["workspace_id"] for f in forks}) == 1, forks

    # A key names its workspace for good: once terminated (kept), the key is refused by name.
    with api_client(first) as api:
        assert ok(api.delete(f"/workspaces/{ws}", params={"keep_snapshot": "true"}))["terminated"]
        refused = api.post("/workspaces", json={"idempotency_key": "job-7"})
        assert refused.status_code == 409, refused.text
        assert ws in refused.json()["error"]["message"]


def test_two_gateways_that_need_one_suspended_workspace_at_once_resume_it_once(
    two_gateways: tuple[Served, Served],
) -> None:
    plane = two_gateways[0].backend.plane
    assert plane is not None
    with api_client(two_gateways[0]) as api:
        ws = ok(api.post("/workspaces", json={}))["workspace_id"]
        ok(api.post(f"/workspaces/{ws}/exec", json={"command": "echo kept > notes.txt"}))
    (running,) = [s for s in plane.sandboxes() if s.name == ws and s.result is None]
    # Ended from outside the gateways (a lifetime, the dashboard): it reads suspended.
    plane.end_sandbox(running.sandbox_id, api_pb2.GenericResult.GENERIC_STATUS_TERMINATED)

    ran = at_once(two_gateways, f"/workspaces/{ws}/exec", {"command": "cat notes.txt"})

    assert [r["stdout"] for r in ran] == ["kept\n", "kept\n"], ran
    live = [s for s in plane.sandboxes() if s.name == ws and s.result is None]
    assert len(live) == 1, "resumed once: neither gateway ended the other's sandbox"
    started = [s for s in plane.sandboxes() if s.name == ws]
    assert len(started) == 2, "the first sandbox and one resume"
