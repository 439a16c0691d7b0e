"""The local driver: workspaces as directories with their own agent daemon, found again by a
restarted server, isolated with bubblewrap where it works here.

Every test runs the real agent daemon and talks to it over its real socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import urllib.parse
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest
from modal_workspace_core import policy
from modal_workspace_core.drivers.base import WorkspaceSpec
from modal_workspace_core.drivers.local.driver import IsolationMode, LocalDriver
from modal_workspace_core.errors import ConflictError, InvalidArgumentError, NotFoundError
from support.agent_exec import drain, run
from support.git_server import GitServer
from support.processes import pid_alive, processes_of


@pytest.fixture
async def driver(tmp_path: Path) -> AsyncIterator[LocalDriver]:
    local = LocalDriver(tmp_path / "data")
    try:
        yield local
    finally:
        await destroy_all(local)


async def destroy_all(local: LocalDriver) -> None:
    for record in await local.list():
        await local.destroy(record.workspace_id)
    await local.close()


async def test_create_list_get_tag_and_destroy(driver: LocalDriver) -> None:
    wid = policy.new_id("ws")
    record = await driver.create(wid, WorkspaceSpec(tags={"owner": "alice"}))
    assert (record.workspace_id, record.driver, record.state) == (wid, "local", "running")
    assert record.tags == {"owner": "alice"}
    assert datetime.fromisoformat(record.created_at).tzinfo is not None
    assert [r.workspace_id for r in await driver.list()] == [wid]
    assert await driver.get(wid) == record

    tagged = await driver.set_tags(wid, {"task": "tests", "owner": "bob"})
    assert tagged.tags == {"owner": "bob", "task": "tests"}
    kept = driver.records.read_now(wid)
    assert kept is not None and kept["tags"] == tagged.tags

    pid = json.loads((driver.data_root / wid / "agent.pid").read_text())["pid"]
    assert pid_alive(pid)
    await driver.destroy(wid)
    assert not pid_alive(pid)
    assert not (driver.data_root / wid).exists()
    assert await driver.list() == []
    with pytest.raises(NotFoundError) as caught:
        await driver.get(wid)
    assert caught.value.field == "workspace_id"


async def test_a_tag_reserved_for_driver_records_is_refused_here_too(driver: LocalDriver) -> None:
    # One rule in the core for every driver, whether or not it keeps records in tags.
    with pytest.raises(InvalidArgumentError) as caught:
        await driver.create(policy.new_id("ws"), WorkspaceSpec(tags={"mwc-sn-forged": "x"}))
    assert caught.value.field == "tags.mwc-sn-forged"
    assert await driver.list() == []


async def test_commands_run_in_the_workspace_with_its_environment(driver: LocalDriver) -> None:
    wid = policy.new_id("ws")
    spec = WorkspaceSpec(env={"GREETING": "hello"}, secret_env={"API_TOKEN": "s3cret-value"})
    record = await driver.create(wid, spec)
    client = await driver.connect(wid)
    try:
        done = await run(client, 'pwd; echo "$GREETING"; test -n "$API_TOKEN" && echo yes')
    finally:
        await client.close()
    assert done.exit["returncode"] == 0
    assert done.stdout.splitlines() == [record.root, "hello", "yes"]
    # Secret values never reach the disk of the data root (the workspace's own disk image is
    # read through its mount point, like every file of the workspace).
    for path in (driver.data_root / wid).rglob("*"):
        if path.is_file() and path.name != "disk.img":
            assert b"s3cret-value" not in path.read_bytes(), path


async def test_a_second_create_with_the_same_id_conflicts(driver: LocalDriver) -> None:
    wid = policy.new_id("ws")
    await driver.create(wid, WorkspaceSpec())
    with pytest.raises(ConflictError):
        await driver.create(wid, WorkspaceSpec())
    assert len(await driver.list()) == 1


@pytest.mark.parametrize("bad", ["../../etc", "ws-123", "WS-" + "a" * 32, ""])
async def test_malformed_ids_are_refused_before_touching_the_disk(
    driver: LocalDriver, bad: str
) -> None:
    for call in (
        driver.create(bad, WorkspaceSpec()),
        driver.get(bad),
        driver.set_tags(bad, {}),
        driver.destroy(bad),
    ):
        with pytest.raises(InvalidArgumentError) as caught:
            await call
        assert caught.value.field == "workspace_id"
    assert list(driver.data_root.iterdir()) == []


async def test_bad_env_names_are_refused(driver: LocalDriver) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        await driver.create(policy.new_id("ws"), WorkspaceSpec(env={"BAD NAME": "x"}))
    assert caught.value.field == "env"
    assert list(driver.data_root.iterdir()) == []


async def test_concurrent_tag_updates_from_two_servers_all_land(
    driver: LocalDriver, tmp_path: Path
) -> None:
    wid = policy.new_id("ws")
    await driver.create(wid, WorkspaceSpec())
    other = LocalDriver(driver.data_root)
    await asyncio.gather(
        *(d.set_tags(wid, {f"k{i}": str(i)}) for i in range(20) for d in (driver, other))
    )
    assert (await other.get(wid)).tags == {f"k{i}": str(i) for i in range(20)}


async def test_a_restarted_server_finds_workspaces_and_their_exec_logs(tmp_path: Path) -> None:
    first = LocalDriver(tmp_path / "data")
    wid = policy.new_id("ws")
    await first.create(wid, WorkspaceSpec(tags={"keep": "me"}))
    client = await first.connect(wid)
    before = await run(client, "echo before the restart")
    await client.close()
    await first.close()
    del first

    second = LocalDriver(tmp_path / "data")
    try:
        [record] = await second.list()
        assert (record.workspace_id, record.tags, record.state) == (wid, {"keep": "me"}, "running")
        client = await second.connect(wid)
        try:
            listed, _ = await client.request("exec.list")
            [earlier] = listed["execs"]
            assert earlier["state"] == "finished"
            again = await drain(client, earlier["exec_id"])
            assert again.stdout == before.stdout == "before the restart\n"
        finally:
            await client.close()
    finally:
        await destroy_all(second)


async def test_connect_restarts_a_dead_daemon_and_its_running_execs_are_lost(
    driver: LocalDriver,
) -> None:
    wid = policy.new_id("ws")
    await driver.create(wid, WorkspaceSpec())
    client = await driver.connect(wid)
    status, _ = await client.request("exec.start", {"command": "sleep 600"})
    await client.close()
    pid = json.loads((driver.data_root / wid / "agent.pid").read_text())["pid"]
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (await driver.get(wid)).state != "stopped":
        assert time.monotonic() < deadline, "the killed daemon still counts as running"
        await asyncio.sleep(0.05)

    client = await driver.connect(wid)
    try:
        assert (await driver.get(wid)).state == "running"
        after, _ = await client.request("exec.status", {"exec_id": status["exec_id"]})
        assert after["state"] == "lost"
    finally:
        await client.close()


async def test_destroy_ends_every_process_of_the_workspace(driver: LocalDriver) -> None:
    wid = policy.new_id("ws")
    await driver.create(wid, WorkspaceSpec())
    client = await driver.connect(wid)
    try:
        await client.request("exec.start", {"command": "sleep 600 & sleep 600; wait"})
        deadline = time.monotonic() + 30
        while len(processes_of(wid)) < 3:  # the daemon and at least the two sleeps
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
    finally:
        await client.close()
    await driver.destroy(wid)
    assert processes_of(wid) == []


async def test_unisolated_workspaces_work_and_are_cleaned_up(tmp_path: Path) -> None:
    local = LocalDriver(tmp_path / "data", isolation="none")
    wid = policy.new_id("ws")
    try:
        record = await local.create(wid, WorkspaceSpec())
        assert record.root == str(local.data_root / wid / "workspace")
        client = await local.connect(wid)
        try:
            done = await run(client, "pwd; sleep 600 >/dev/null 2>&1 & echo started")
        finally:
            await client.close()
        assert done.stdout.splitlines() == [record.root, "started"]
        with pytest.raises(InvalidArgumentError) as caught:
            await local.create(policy.new_id("ws"), WorkspaceSpec(block_network=True))
        assert caught.value.field == "block_network"
    finally:
        await destroy_all(local)
    assert processes_of(wid) == []


async def test_a_deep_data_root_still_reaches_the_socket(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    modes: list[IsolationMode] = ["auto", "none"]
    for isolation in modes:
        local = LocalDriver(deep / isolation, isolation=isolation)
        wid = policy.new_id("ws")
        try:
            await local.create(wid, WorkspaceSpec())
            assert len(str(local.data_root / wid / "run" / "agent.sock")) > 108
            client = await local.connect(wid)
            try:
                done = await run(client, "echo reached")
            finally:
                await client.close()
            assert done.stdout == "reached\n"
        finally:
            await destroy_all(local)


ASKPASS = """#!/bin/sh
case "$1" in
  Username*) echo x-access-token ;;
  *) printf '%s\\n' "$MWC_TEST_GIT_TOKEN" ;;
esac
"""


async def test_a_workspace_clones_from_the_test_server_with_askpass(
    tmp_path: Path, git_server: GitServer
) -> None:
    # The test server listens on the host's loopback: the operator's allowlist opens its port.
    port = urllib.parse.urlsplit(git_server.base_url).port
    assert port is not None
    driver = LocalDriver(tmp_path / "data", host_ports=(port,))
    try:
        await _clone_in_a_workspace(driver, git_server)
    finally:
        await destroy_all(driver)


async def _clone_in_a_workspace(driver: LocalDriver, git_server: GitServer) -> None:
    wid = policy.new_id("ws")
    await driver.create(wid, WorkspaceSpec())
    client = await driver.connect(wid)
    try:
        await client.request(
            "file.write", {"path": ".mwc/askpass", "create_parents": True}, ASKPASS.encode()
        )
        url = git_server.repo_url("octo/hello")
        done = await run(
            client,
            f"chmod +x .mwc/askpass && git clone -q {url} src/hello && cat src/hello/README.md",
            env={
                "GIT_CONFIG_GLOBAL": "/dev/null",
                "GIT_ASKPASS": "./.mwc/askpass",
                "GIT_TERMINAL_PROMPT": "0",
                "MWC_TEST_GIT_TOKEN": git_server.token,
            },
            secrets=[git_server.token],
        )
    finally:
        await client.close()
    assert done.exit["returncode"] == 0, done.stderr
    assert done.stdout == "# hello\n"
    assert git_server.token in git_server.passwords
    # The exec's environment is recorded with the token redacted: it is in no file.
    for path in (driver.data_root / wid).rglob("*"):
        if path.is_file() and path.name != "disk.img":  # read through its mount point
            assert git_server.token.encode() not in path.read_bytes(), path


async def test_a_fork_gets_none_of_its_parents_secrets(tmp_path: Path) -> None:
    """The local driver's side of the Modal driver's test: a workspace made with a secret (as a
    client asks for one, by name), forked from a snapshot and without one (the fork takes its
    own). The parent's commands have the secret; each fork's have neither its value nor its
    name, and neither has anything the fork was started with: its record, its agent's command
    line (which names the variables to redact), the launch configuration on its agent's
    standard input (read as root), its files."""
    import hashlib
    import secrets

    import modal_workspace_core as mwc
    from modal_workspace_core.config import load_settings

    value = "s3cret-" + secrets.token_hex(12)
    name = "OPENAI_API_KEY"
    held = tmp_path / "secrets.json"
    held.write_text(json.dumps({"openai": {name: value}}))
    env = {
        "MODAL_WORKSPACE_LOCAL_SECRETS_FILE": str(held),
        "MODAL_WORKSPACE_ALLOWED_SECRETS": f"openai:{name}",
    }
    settings = load_settings(env, data_root=tmp_path / "data")
    # Neither line holds the value: one is its digest, one the variable as output shows it.
    show = f'printf %s "${{{name}-unset}}" | sha256sum; echo "${{{name}-unset}}"; env'
    digest = hashlib.sha256(value.encode()).hexdigest()

    def started_with(data_root: Path, workspace_id: str) -> tuple[bytes, bytes | None]:
        """The command lines of the workspace's agent and the processes starting it, and its
        launch configuration (None unless root may read it)."""
        recorded = json.loads((data_root / workspace_id / "agent.pid").read_text())["pid"]
        pids = [recorded, *(p for p in processes_of(workspace_id) if p != recorded)]
        argv = b""
        for pid in pids:
            with contextlib.suppress(OSError):  # one that ended meanwhile started nothing
                argv += Path(f"/proc/{pid}/cmdline").read_bytes() + b"\n"
        try:
            config = Path(f"/proc/{recorded}/fd/0").read_bytes()
        except PermissionError:
            config = None
        return argv, config

    async with mwc.Workspaces(settings=settings) as wss:
        driver = wss.service.driver
        assert isinstance(driver, LocalDriver)
        parent = await wss.create(secret_names=["openai"])
        assert (await parent.exec(show)).stdout.split()[0] == digest
        argv, config = started_with(driver.data_root, parent.id)
        # The checks below can see a secret where there is one.
        assert name.encode() in argv
        assert config is None or (name.encode() in config and value.encode() in config)

        snapshot = await wss.call("workspace_snapshot", workspace_id=parent.id, label="s")
        snapshot_id = snapshot.model_dump()["snapshot_id"]
        forks = [
            (await wss.call("workspace_fork", **args)).model_dump()["workspace_id"]
            for args in (
                {"workspace_id": parent.id, "snapshot_id": snapshot_id},
                {"workspace_id": parent.id},
            )
        ]
        try:
            for fork_id in forks:
                fork = await wss.get(fork_id)
                seen = (await fork.exec(show)).stdout.splitlines()
                assert seen[0].split()[0] != digest and seen[1] == "unset", fork_id
                assert not any(line.startswith(f"{name}=") for line in seen[2:]), fork_id
                meta = json.dumps(driver.records.read_now(fork_id))
                assert fork_id in meta and name not in meta and value not in meta
                argv, config = started_with(driver.data_root, fork_id)
                assert name.encode() not in argv
                if config is not None:
                    assert json.loads(config)["env"].get(name) is None
                    assert name.encode() not in config and value.encode() not in config
                for path in (driver.data_root / fork_id).rglob("*"):
                    if path.is_file() and path.name != "disk.img":
                        assert value.encode() not in path.read_bytes(), path
            # Nor any record (the parent's neither): the store, its write-ahead log included.
            for path in driver.data_root.glob("shared.sqlite3*"):
                assert value.encode() not in path.read_bytes(), path
        finally:
            for fork_id in forks:
                await (await wss.get(fork_id)).terminate()
