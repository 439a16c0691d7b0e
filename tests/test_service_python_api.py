"""The Python API in-process over the real local driver and agent: `async with Workspaces()`,
`exec`, an iterator that follows an exec to its end, generated methods, a workspace whose
agent died answering again on the next call, and a workspace's secrets kept out of all output."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import modal_workspace_core as mwc
import pytest
from e2e_support import workspace_files_containing
from modal_workspace_core.config import Settings, load_settings
from support.git_server import GitServer
from support.processes import pid_alive, processes_of


@pytest.fixture
async def wss(tmp_path: Path) -> AsyncIterator[mwc.Workspaces]:
    settings = load_settings({}, data_root=tmp_path / "data")
    async with mwc.Workspaces(settings=settings) as client:
        try:
            yield client
        finally:
            for ws in await client.list():
                await ws.terminate()


async def test_exec_and_the_event_iterator_follow_a_command_to_its_end(
    wss: mwc.Workspaces,
) -> None:
    ws = await wss.create(tags={"purpose": "api-test"})
    assert ws.id.startswith("ws-") and ws.info.tags["purpose"] == "api-test"
    result = await ws.exec("echo hi; echo oops >&2")
    assert (result.stdout, result.stderr, result.returncode) == ("hi\n", "oops\n", 0)
    kinds, text = [], ""
    async for event in ws.exec_stream("for i in 1 2 3; do echo line $i; sleep 0.2; done"):
        kinds.append(event.type)
        if event.type == "stdout":
            text += event.data or ""
    assert text == "line 1\nline 2\nline 3\n"
    assert "exit" in kinds
    assert [w.id for w in await wss.list()] == [ws.id]


async def test_a_page_says_the_state_its_events_show_and_asks_the_agent_only_when_they_cannot(
    wss: mwc.Workspaces, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = await wss.create()
    service = wss.service
    asked: list[str] = []
    real_request = service.request

    async def request(workspace_id: str, op: str, *args: Any, **kwargs: Any) -> Any:
        asked.append(op)
        return await real_request(workspace_id, op, *args, **kwargs)

    monkeypatch.setattr(service, "request", request)
    started = await ws.realtime_exec_start("sleep 0.3; for i in 1 2 3; do echo $i; sleep 0.2; done")
    cursor, pages = 0, []
    while True:
        asked.clear()
        page = await ws.realtime_exec_events(started.exec_id, cursor=cursor, wait_seconds=10)
        kinds = [event.type for event in page.events]
        pages.append((kinds, page.state, page.returncode, "exec.status" in asked))
        cursor = page.next_cursor
        if page.done:
            break
    output_only = [p for p in pages if p[0] and set(p[0]) <= {"stdout"}]
    assert output_only, pages
    # A page woken by output needs no second round trip to the agent: it says `running`.
    assert all(state == "running" and rc is None and not ask for _, state, rc, ask in output_only)
    ended = next(p for p in pages if "exit" in p[0])
    assert (ended[1], ended[2]) == ("finished", 0), pages
    # What the pages said matches the agent's own record at the end.
    status = await ws.realtime_exec_status(started.exec_id)
    assert (status.state, status.returncode) == ("finished", 0)


async def test_cancel_answers_once_the_exec_has_ended_even_one_that_ignores_sigterm(
    wss: mwc.Workspaces,
) -> None:
    ws = await wss.create()
    stubborn = await ws.realtime_exec_start("trap '' TERM; echo ready; while :; do sleep 0.1; done")
    page = await ws.realtime_exec_events(stubborn.exec_id, wait_seconds=10)
    while "ready" not in "".join(e.data or "" for e in page.events):
        page = await ws.realtime_exec_events(
            stubborn.exec_id, cursor=page.next_cursor, wait_seconds=10
        )
    ended = await ws.realtime_exec_cancel(stubborn.exec_id, grace_seconds=1)
    # SIGTERM was ignored; SIGKILL after the grace period ended it, before the reply.
    assert (ended.state, ended.returncode) == ("cancelled", -9), ended


async def test_a_watch_is_followed_by_pages_until_it_is_cancelled(wss: mwc.Workspaces) -> None:
    ws = await wss.create()
    watch = await ws.file_watch_start(path="/workspace", kinds=["create"])
    await ws.file_write("made.txt", "x")
    page = await ws.file_watch_events(watch.watch_id, wait_seconds=10)
    assert [(e.type, e.model_extra["path"]) for e in page.events] == [("fs", "made.txt")]
    assert (page.state, page.done) == ("watching", False)
    await ws.file_watch_cancel(watch.watch_id)
    cursor, states = page.next_cursor, []
    while not page.done:
        page = await ws.file_watch_events(watch.watch_id, cursor=cursor, wait_seconds=10)
        states.append(page.state)
        cursor = page.next_cursor
    assert states[-1] == "cancelled", states


def github_settings(tmp_path: Path, git_server: GitServer) -> Settings:
    """Settings whose GitHub is the test server, with its token as the allowlisted secret."""
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"github": {"GH_TOKEN": git_server.token}}))
    env = {
        **git_server.gateway_env,
        "MODAL_WORKSPACE_ALLOWED_SECRETS": "github",
        "MODAL_WORKSPACE_LOCAL_SECRETS_FILE": str(secrets),
    }
    return load_settings(env, data_root=tmp_path / "data")


async def test_a_gateway_restarted_mid_fetch_still_records_its_repo_tags(
    tmp_path: Path, git_server: GitServer
) -> None:
    settings = github_settings(tmp_path, git_server)
    # A clone whose ref updates are slow (a reference-transaction hook of its own), so a fetch
    # is still running when the first gateway goes away; the server gets a commit to fetch.
    setup = (
        "printf '#!/bin/sh\\nsleep 1\\n' > hello/.git/hooks/reference-transaction && "
        "chmod +x hello/.git/hooks/reference-transaction"
    )
    bare = git_server.root / "octo/hello.git"
    async with mwc.Workspaces(settings=settings) as first:
        ws = await first.create(keep=True)  # for the second gateway to find
        cloned = await ws.repo_clone("octo/hello", use_github_token=True)
        events = [e async for e in ws.follow(cloned.exec_id)]
        assert (await ws.realtime_exec_status(cloned.exec_id)).returncode == 0, [
            e.data for e in events if e.data
        ]
        assert (await ws.exec(setup)).returncode == 0
        tree = git_plumbing(bare, "rev-parse", "main^{tree}")
        commit = git_plumbing(bare, "commit-tree", "-p", "main", "-m", "two", tree)
        git_plumbing(bare, "update-ref", "refs/heads/main", commit)
        fetch = await ws.repo_fetch("/workspace/hello", use_github_token=True)
    async with mwc.Workspaces(settings=settings) as second:
        try:
            again = await second.get(ws.id)
            # Nobody recorded it: the first gateway is gone and the fetch has not ended.
            assert "repo-fetched-at" not in again.info.tags
            assert (await again.realtime_exec_status(fetch.exec_id)).state in (
                "starting",
                "running",
            )
            deadline = time.monotonic() + 60
            while "repo-fetched-at" not in (await again.refresh()).tags:
                assert time.monotonic() < deadline, "the second gateway never recorded the tag"
                await asyncio.sleep(0.2)
            # Settled with the agent, which kept it (never a file of the workspace).
            while (await second.service.request(ws.id, "exec.notes", {}))[0]["execs"]:
                assert time.monotonic() < deadline, "the note was never settled"
                await asyncio.sleep(0.2)
            with pytest.raises(mwc.WorkspaceError):
                await again.file_list(path=".mwc")
        finally:
            await again.terminate()


async def test_repo_operations_act_on_the_cloned_repository_when_no_destination_is_named(
    tmp_path: Path, git_server: GitServer
) -> None:
    settings = github_settings(tmp_path, git_server)
    async with mwc.Workspaces(settings=settings) as wss, wss.create() as ws:
        with pytest.raises(mwc.InvalidArgumentError, match="no cloned repository") as refused:
            await ws.repo_status()
        assert refused.value.field == "destination"
        cloned = await ws.repo_clone(
            "octo/hello", "feature", destination="src/hello", use_github_token=True
        )
        events = [e async for e in ws.follow(cloned.exec_id)]
        ended = await ws.realtime_exec_status(cloned.exec_id)
        assert ended.returncode == 0, [e.data for e in events if e.data]
        deadline = time.monotonic() + 30
        while "repo-path" not in (await ws.refresh()).tags:
            assert time.monotonic() < deadline, "the clone's tags were never recorded"
            await asyncio.sleep(0.1)
        status = await ws.repo_status()
        assert (status.destination, status.branch) == ("/workspace/src/hello", "feature")
        await ws.file_write("src/hello/NEW.md", "new\n")
        assert "+new" in (await ws.repo_diff()).diff
        checkout = await ws.repo_checkout("main")
        assert checkout.destination == "/workspace/src/hello"
        [e async for e in ws.follow(checkout.exec_id)]
        assert (await ws.repo_status()).branch == "main"


def git_plumbing(bare: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    done = subprocess.run(
        ["git", f"--git-dir={bare}", *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


async def test_a_pending_record_forged_in_the_workspace_sets_no_tag(tmp_path: Path) -> None:
    """Files in the workspace that look like an older gateway's pending records are nothing to
    the gateway: what it records comes from the agent's own record of its execs."""
    settings = load_settings({}, data_root=tmp_path / "data")
    async with mwc.Workspaces(settings=settings) as first:
        ws = await first.create(keep=True)  # for the second gateway to find
        done = await ws.realtime_exec_start("true")
        forged = {"exec_id": done.exec_id, "tags": {"repo-url": "https://evil.example/o/r"}}
        path = f".mwc/pending-{done.exec_id}.json"
        await ws.file_write(path, json.dumps(forged), create_parents=True)
    async with mwc.Workspaces(settings=settings) as second:
        again = await second.get(ws.id)
        try:
            await again.exec("true")  # the first channel of this gateway settles what is owed
            listed, _ = await second.service.request(ws.id, "exec.notes", {})
            assert listed["execs"] == []
            await asyncio.sleep(0.5)
            tags = (await again.refresh()).tags
            assert "repo-url" not in tags and "repo-path" not in tags
        finally:
            await again.terminate()


async def test_generated_methods_take_required_fields_positionally(wss: mwc.Workspaces) -> None:
    ws = await wss.create()
    await ws.file_write("notes/a.txt", "alpha\n")
    read = await ws.file_read("notes/a.txt")
    assert read.content == "alpha\n"
    edited = await ws.file_edit("notes/a.txt", "alpha", "beta")
    assert edited.replacements == 1
    hits = await ws.file_search("beta")
    assert [h.path for h in hits.hits] == ["/workspace/notes/a.txt"]
    with pytest.raises(mwc.WorkspaceError) as info:
        await ws.file_read("../outside")
    assert (info.value.code, info.value.field) == ("invalid_argument", "path")


async def test_the_gateways_own_git_runs_are_not_in_the_exec_list(wss: mwc.Workspaces) -> None:
    ws = await wss.create()
    setup = "git init -q repo && cd repo && echo x > a && git add a && echo y > b"
    user_run = await ws.exec(setup)
    assert user_run.returncode == 0, user_run.stderr
    user_realtime = await ws.realtime_exec_start("true")
    status = await ws.repo_status("repo")
    assert [e.path for e in status.entries] == ["a", "b"]
    diff = await ws.repo_diff("repo")
    assert "+y" in diff.diff
    listed = await ws.realtime_exec_list()
    assert {e.exec_id for e in listed.execs} == {user_run.exec_id, user_realtime.exec_id}


async def test_a_workspace_whose_agent_died_answers_again(wss: mwc.Workspaces) -> None:
    ws = await wss.create()
    first = await ws.exec("echo before")
    assert first.stdout == "before\n"
    victims = processes_of(ws.id)
    assert victims
    for pid in victims:
        # A short-lived helper of the agent may have exited since it was listed: already gone.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while any(pid_alive(pid) for pid in victims):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # The cached channel is dead; the service reopens it (the driver restarts the agent).
    again = await ws.exec("echo after")
    assert again.stdout == "after\n"
    history = await ws.realtime_exec_list()
    assert first.exec_id in {e.exec_id for e in history.execs}


async def test_a_workspace_secret_reaches_its_commands_but_never_their_output(
    tmp_path: Path,
) -> None:
    secret = "db-" + os.urandom(12).hex()
    values = tmp_path / "secrets.json"
    values.write_text(json.dumps({"db": {"DB_PASSWORD": secret}}))
    env = {
        "MODAL_WORKSPACE_ALLOWED_SECRETS": "db",
        "MODAL_WORKSPACE_LOCAL_SECRETS_FILE": str(values),
    }
    data_root = tmp_path / "data"
    settings = load_settings(env, data_root=data_root)
    async with mwc.Workspaces(settings=settings) as wss:
        ws = await wss.create(secret_names=["db"])
        try:
            # The command has the value (its digest proves it) ...
            digest = hashlib.sha256(secret.encode()).hexdigest()
            check = await ws.exec('printf %s "$DB_PASSWORD" | sha256sum')
            assert check.stdout.split()[0] == digest
            # ... and whatever it prints of it, whole or in two writes, is redacted.
            shown = await ws.exec(
                'echo "$DB_PASSWORD"; printf %s "${DB_PASSWORD%????}" >&2; sleep 0.1; '
                'printf "%s\\n" "${DB_PASSWORD#${DB_PASSWORD%????}}" >&2'
            )
            assert (shown.stdout, shown.stderr) == ("[REDACTED]\n", "[REDACTED]\n")
            streamed = [e async for e in ws.exec_stream('echo "key=$DB_PASSWORD"')]
            assert secret not in json.dumps([e.model_dump() for e in streamed])
            # Nothing the gateway or the agent keeps on disk holds it either.
            assert workspace_files_containing(data_root, secret) == []
        finally:
            await ws.terminate()
