"""The product on the Modal driver, end to end through the service table (the same operations as
REST, MCP and the Python API): the real `modal` SDK against the local control plane, the real
agent daemon in each sandbox, real git over the local smart-HTTP server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_control_plane.isolation import usable_bwrap
from modal_workspace_core.client import Workspaces
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.modal import ModalDriver, ModalSettings
from modal_workspace_core.errors import NotFoundError
from support.git_server import GitServer, insteadof_config

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

IMAGE = "service-test-image"
# The service sends container paths (`/workspace`) inside the protocol, where the control plane
# cannot translate them: sandboxes must see real container paths.
pytestmark = pytest.mark.skipif(
    not usable_bwrap(), reason="bubblewrap does not work here (.ci/run installs it)"
)


@pytest.fixture
def idle_seconds() -> float:
    return 60.0


@pytest.fixture
async def workspaces(
    modal_control_plane: ControlPlane, git_server: GitServer, tmp_path: Path, idle_seconds: float
) -> AsyncIterator[Workspaces]:
    modal_control_plane.publish_image(IMAGE, "im-servicetestimage0000")
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"github": {"GH_TOKEN": git_server.token}}))
    settings = load_settings(
        {
            "MODAL_WORKSPACE_DRIVER": "modal",
            "MODAL_WORKSPACE_ALLOWED_SECRETS": "github",
            "MODAL_WORKSPACE_LOCAL_SECRETS_FILE": str(secrets),
            "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "data"),
        }
    )
    driver = ModalDriver(
        ModalSettings(
            app_name="service-tests", default_image_name=IMAGE, channel_idle_seconds=idle_seconds
        )
    )
    async with Workspaces(driver, settings=settings) as wss:
        yield wss
    await driver.close()


async def test_exec_runs_a_command_in_the_workspace(workspaces: Workspaces) -> None:
    ws = await workspaces.create(env={"GREETING": "hello"})

    result = await ws.exec('echo "$GREETING from $(basename "$PWD")"; echo oops >&2; exit 3')

    assert result.returncode == 3
    assert result.stdout == "hello from workspace\n"
    assert result.stderr == "oops\n"
    assert (await workspaces.get(ws.id)).info.driver == "modal"


async def test_a_realtime_exec_takes_stdin_and_can_be_cancelled(workspaces: Workspaces) -> None:
    ws = await workspaces.create()
    started = await ws.realtime_exec_start("cat")

    await ws.realtime_exec_input(started.exec_id, data="typed line\n")
    seen = ""
    cursor = 0
    while "typed line" not in seen:
        page = await ws.realtime_exec_events(started.exec_id, cursor=cursor, wait_seconds=10)
        seen += "".join(e.data or "" for e in page.events if e.type == "stdout")
        cursor = page.next_cursor
    await ws.realtime_exec_cancel(started.exec_id, grace_seconds=1)
    events = [e async for e in ws.follow(started.exec_id, cursor=cursor)]

    assert [e.type for e in events].count("exit") == 1
    status = await ws.realtime_exec_status(started.exec_id)
    assert status.state == "cancelled"


async def test_files_are_written_read_and_listed(workspaces: Workspaces) -> None:
    ws = await workspaces.create()

    await ws.file_write("notes/todo.txt", content="ship it\n")
    read = await ws.file_read("notes/todo.txt")
    listed = await ws.file_list(path="notes")

    assert read.content == "ship it\n"
    assert [Path(entry.path).name for entry in listed.entries] == ["todo.txt"]
    assert (await ws.exec("cat notes/todo.txt")).stdout == "ship it\n"


async def test_a_clone_runs_real_git_with_the_token_kept_out_of_argv(
    workspaces: Workspaces, git_server: GitServer
) -> None:
    ws = await workspaces.create(env={"GIT_CONFIG_GLOBAL": "/workspace/.gitconfig"})
    await ws.file_write(
        ".gitconfig", content=insteadof_config(git_server.base_url, username="x-access-token")
    )

    clone = await ws.repo_clone("octo/hello", use_github_token=True)
    events = [e async for e in ws.follow(clone.exec_id)]

    status = await ws.realtime_exec_status(clone.exec_id)
    assert (status.state, status.returncode) == ("finished", 0)
    assert (await ws.exec("git -C hello rev-parse --abbrev-ref HEAD")).stdout == "main\n"
    assert git_server.token in git_server.passwords
    assert all(git_server.token not in (e.data or "") for e in events)


async def test_terminate_makes_the_workspace_not_found(workspaces: Workspaces) -> None:
    ws = await workspaces.create()

    await ws.terminate()

    with pytest.raises(NotFoundError):
        await workspaces.get(ws.id)
    assert ws.id not in [w.workspace_id for w in await workspaces.list()]


@pytest.mark.parametrize("idle_seconds", [1.0])
async def test_after_the_channel_idles_out_the_next_request_reconnects(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    ws = await workspaces.create()
    started = await ws.realtime_exec_start("echo before; sleep 3; echo after")
    client = await workspaces.service.agent(ws.id)
    before = modal_control_plane.calls()["TaskExecStart"]

    for _ in range(300):
        if client.closed:
            break
        await asyncio.sleep(0.05)
    assert client.closed

    # The reader of the exec resumes on a new channel: one new exec, nothing lost.
    events = [e async for e in ws.follow(started.exec_id)]
    assert "".join(e.data or "" for e in events if e.type == "stdout") == "before\nafter\n"
    assert (await ws.exec("echo again")).stdout == "again\n"
    assert modal_control_plane.calls()["TaskExecStart"] - before == 1
