"""A workspace whose agent stops answering (a command ran `kill -STOP` on it) costs its callers
a bounded wait and a clear 504 naming the workspace; every other workspace is served meanwhile,
and the stopped agent is started again, so the workspace answers again."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2

from .gateway import AUTH, Gateway, gateway

# The gateway's deadline for an agent's answer, short for the test (the default is 30 s).
AGENT_TIMEOUT = 3
# Far more than the deadline; a request with no deadline never ends within it.
ANSWER_TIMEOUT = 30.0


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            parent = int(stat[stat.rfind(")") + 2 :].split()[1])
            tree.setdefault(parent, []).append(int(entry.name))
    return tree


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (under bubblewrap the recorded pid is bwrap's)."""
    children, found, todo = _children(), [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


@contextlib.contextmanager
def stopped_agent(gw: Gateway, workspace_id: str) -> Iterator[None]:
    recorded = json.loads((gw.data_root / workspace_id / "agent.pid").read_text())
    pids = _tree(int(recorded["pid"]))
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _create(client: httpx2.Client, gw: Gateway) -> str:
    response = client.post(gw.url("/api/workspaces"), headers=AUTH, json={})
    assert response.status_code == 200, response.text
    return str(response.json()["workspace_id"])


def _list_files(client: httpx2.Client, gw: Gateway, workspace_id: str) -> httpx2.Response:
    return client.get(gw.url(f"/api/workspaces/{workspace_id}/files"), headers=AUTH)


def test_a_stopped_agent_gives_a_504_naming_its_workspace_and_others_are_served(
    tmp_path: Path,
) -> None:
    env = {"MODAL_WORKSPACE_AGENT_TIMEOUT": str(AGENT_TIMEOUT)}
    with gateway(tmp_path, env=env) as gw, httpx2.Client(timeout=ANSWER_TIMEOUT) as client:
        stopped, other = _create(client, gw), _create(client, gw)
        assert _list_files(client, gw, stopped).status_code == 200  # its channel is open

        answers: dict[str, httpx2.Response | BaseException] = {}

        def ask(name: str, workspace_id: str) -> None:
            try:
                answers[name] = _list_files(client, gw, workspace_id)
            except httpx2.HTTPError as exc:
                answers[name] = exc

        with stopped_agent(gw, stopped):
            waiting = threading.Thread(target=ask, args=("stopped", stopped))
            waiting.start()
            ask("other", other)  # while the stopped workspace's request waits
            waiting.join(ANSWER_TIMEOUT + 5)
            poll = client.get(gw.url(f"/api/workspaces/{stopped}/realtime-execs"), headers=AUTH)
        after = _list_files(client, gw, stopped)

    other_answer, stopped_answer = answers["other"], answers["stopped"]
    assert isinstance(other_answer, httpx2.Response) and other_answer.status_code == 200
    assert isinstance(stopped_answer, httpx2.Response), f"no answer: {stopped_answer!r}"
    assert stopped_answer.status_code == 504, stopped_answer.text
    error = stopped_answer.json()["error"]
    assert error["code"] == "timeout"
    assert stopped in error["message"]
    # The stopped agent was told apart from a busy one and started again: the next request
    # is served by the new agent while the old processes are still stopped.
    assert "restarted" in error["message"]
    assert poll.status_code == 200, poll.text
    assert after.status_code == 200, after.text


def test_over_rest_a_stopped_agent_is_answered_before_gpt_actions_gives_up(
    tmp_path: Path,
) -> None:
    """An operator's long agent deadline (600 s) still answers a REST call in time for GPT
    Actions (45 s): the call's own deadline is the Actions one."""
    import time

    env = {"MODAL_WORKSPACE_AGENT_TIMEOUT": "600"}
    with gateway(tmp_path, env=env) as gw, httpx2.Client(timeout=120) as client:
        ws = _create(client, gw)
        assert _list_files(client, gw, ws).status_code == 200  # its channel is open
        with stopped_agent(gw, ws):
            began = time.monotonic()
            # A file listing always asks the agent (a page of events may come from the cache).
            answer = _list_files(client, gw, ws)
            took = time.monotonic() - began
    assert answer.status_code == 504, answer.text
    # A bound on behaviour (a deadline), not a measure of speed: 40 s is the gateway's own.
    assert took < 45, took
