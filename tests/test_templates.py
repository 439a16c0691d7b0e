"""Templates, on the local driver and on the Modal driver (the real SDK against the test control
plane, the real agent under bubblewrap): a repository cloned at a branch from the test git server
(standing in for GitHub), its setup run once and snapshotted; workspaces started from the build;
the sweep rebuilding it when the branch moves, at most once per check interval; a failed
rebuild keeping the last good build; and a delete taking the builds' snapshots with it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import modal_workspace_core as mwc
import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_control_plane.isolation import usable_bwrap
from modal_workspace_core.config import ConfigError, load_settings
from modal_workspace_core.errors import ConflictError, InvalidArgumentError, NotFoundError
from modal_workspace_core.operations.machinery.pages import EventPage
from modal_workspace_core.operations.template_builds import FAILED_KEPT
from modal_workspace_core.operations.templates import Template, TemplateDeleted
from support.git_server import GitServer
from template_support import (
    CHECK_SECONDS,
    SETUP,
    SLUG,
    builds,
    files,
    gone,
    sweep,
    template,
    until_built,
)

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

IMAGE = "template-test-image"
# No sweep of its own: each test sweeps when it means to (and as if when).
NO_SWEEP = {"MODAL_WORKSPACE_JANITOR_SECONDS": "0"}


@pytest.fixture(params=["local", "modal"])
async def wss(
    request: pytest.FixtureRequest, tmp_path: Path, git_server: GitServer
) -> AsyncIterator[mwc.Workspaces]:
    """A gateway whose GitHub is the test server, with its token as the allowlisted `github`
    secret: on the local driver its value in the gateway's secrets file; on Modal a Modal Secret
    of the control plane, and the token in the gateway's environment (as `modal_app.py` has it)."""
    env = {**git_server.gateway_env, **NO_SWEEP, "MODAL_WORKSPACE_ALLOWED_SECRETS": "github"}
    if request.param == "local":
        secrets = tmp_path / "secrets.json"
        secrets.write_text(json.dumps({"github": {"GH_TOKEN": git_server.token}}))
        env["MODAL_WORKSPACE_LOCAL_SECRETS_FILE"] = str(secrets)
        settings = load_settings(env, data_root=tmp_path / "data")
        async with mwc.Workspaces(settings=settings) as client:
            yield client
        return
    if usable_bwrap() is None:
        pytest.skip("bubblewrap does not work here (.ci/run installs it)")
    from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings

    plane: ControlPlane = request.getfixturevalue("modal_control_plane")
    plane.publish_image(IMAGE, "im-templatetestimage0000")
    plane.add_secret("github", {"GH_TOKEN": git_server.token})
    env |= {"MODAL_WORKSPACE_DRIVER": "modal", "GH_TOKEN": git_server.token}
    settings = load_settings(env, data_root=tmp_path / "data")
    driver = ModalDriver(ModalSettings(app_name="template-tests", default_image_name=IMAGE))
    async with mwc.Workspaces(driver, settings=settings) as client:
        yield client
    await driver.close()
    assert plane.unimplemented == []


async def create_template(wss: mwc.Workspaces, **more: object) -> Template:
    args = {
        "name": "hello",
        "repository": SLUG,
        "ref": "main",
        "setup_command": SETUP,
        "use_github_token": True,
        **more,
    }
    return cast(Template, await wss.call("template_create", **args))


async def test_a_template_is_built_once_and_two_creates_start_from_its_build(
    wss: mwc.Workspaces, git_server: GitServer
) -> None:
    made = await create_template(wss)

    assert (made.state, made.build, made.building, made.failed_build) == ("ready", 1, None, None)
    head = git_server.head(SLUG, "main")
    assert made.head == head and made.built_at is not None
    assert made.repository == "https://github.com/octo/hello.git" and made.ref == "main"
    (build,) = await builds(wss, "hello")
    one, two = await wss.create(template="hello"), await wss.create(template="hello")
    for ws in (one, two):
        # The setup ran once, in the build: each workspace has its result, and the clone.
        assert await files(ws, "hello/.setup-done") == f"built from {head}\n"
        assert await files(ws, "hello/README.md") == "# hello\n"
        lineage = ws.info.lineage
        assert lineage is not None and (lineage.template, lineage.template_build) == ("hello", 1)
        assert build.snapshot is not None and lineage.snapshot_id == build.snapshot.snapshot_id
        assert lineage.parent_workspace_id == build.workspace_id
        assert ws.info.tags["repo-url"] == made.repository
    # Independent workspaces: what one writes, the other does not see.
    await one.exec("echo mine > hello/one.txt")
    assert (await two.exec("test -e hello/one.txt")).returncode == 1
    # The build's workspace ended with the build, keeping the snapshot they start from.
    assert build.workspace_id not in [w.id for w in await wss.list()]


async def test_the_sweep_rebuilds_when_the_branch_moves_and_keeps_the_last_good_build(
    wss: mwc.Workspaces, git_server: GitServer
) -> None:
    first = await create_template(wss)
    assert first.build == 1
    (one,) = await builds(wss, "hello")
    # The next interval's sweep asks the remote: nothing moved, nothing is built.
    asked = len(git_server.requests)
    await sweep(wss, later=CHECK_SECONDS)
    assert len(git_server.requests) > asked
    assert (await template(wss, "hello")).model_dump() == first.model_dump()

    # The branch moves (a push to GitHub): the next interval's sweep rebuilds.
    moved = git_server.commit(SLUG, "main", {"NEW.md": "new\n"})
    await sweep(wss, later=2 * CHECK_SECONDS)
    rebuilt = await until_built(wss, "hello")
    assert (rebuilt.build, rebuilt.head) == (2, moved)
    # The build it replaced goes, its snapshot with it (workspaces start from the newest): the
    # build's last work, once its record says ready.
    assert await gone(wss, one.workspace_id)
    two = (await builds(wss, "hello"))[-1]
    assert two.reason == f"its branch moved to {moved[:12]}"
    ws = await wss.create(template="hello")
    assert await files(ws, "hello/NEW.md") == "new\n"
    assert ws.info.lineage is not None and ws.info.lineage.template_build == 2

    # A move that breaks the setup: the rebuild fails, the template keeps build 2.
    git_server.commit(SLUG, "main", {}, remove=("README.md",))
    await sweep(wss, later=3 * CHECK_SECONDS)
    kept = await until_built(wss, "hello")
    assert (kept.state, kept.build, kept.head, kept.failed_build) == ("ready", 2, moved, 3)
    assert kept.error is not None and kept.error.startswith("the setup command exited 1")
    ws = await wss.create(template="hello")
    assert await files(ws, "hello/README.md") == "# hello\n"
    assert ws.info.lineage is not None and ws.info.lineage.template_build == 2
    # The failed build's workspace goes with everything it had; the good one's snapshot stays.
    assert [(b.number, b.state) for b in await builds(wss, "hello")] == [
        (2, "ready"),
        (3, "failed"),
    ]
    assert await gone(wss, (await builds(wss, "hello"))[-1].workspace_id)
    assert await wss.service.driver.list_snapshots(two.workspace_id)


async def test_the_remote_is_asked_at_most_once_per_template_per_interval(
    wss: mwc.Workspaces, git_server: GitServer
) -> None:
    await create_template(wss)  # its build read the branch: this interval's check
    git_server.commit(SLUG, "main", {"NEW.md": "new\n"})

    # Within the same interval no sweep, on any gateway, asks again.
    asked = len(git_server.requests)
    await sweep(wss)
    await sweep(wss, later=1)
    assert (await template(wss, "hello")).build == 1
    assert len(git_server.requests) == asked

    await sweep(wss, later=CHECK_SECONDS)
    assert (await until_built(wss, "hello")).build == 2


async def test_a_build_longer_than_the_wait_answers_building_with_its_progress_stream(
    wss: mwc.Workspaces,
) -> None:
    started = await create_template(wss, setup_command=SETUP + " && sleep 2", wait_seconds=0)

    assert (started.state, started.build, started.building) == ("building", None, 1)
    assert started.building_workspace_id is not None and started.progress_stream_id is not None
    cursor, events = 0, []
    while True:
        page = cast(
            EventPage,
            await wss.call(
                "stream_events",
                workspace_id=started.building_workspace_id,
                stream_id=started.progress_stream_id,
                cursor=cursor,
                wait_seconds=10,
            ),
        )
        events += page.events
        cursor = page.next_cursor
        if page.done:
            break
    (end,) = [e.model_dump() for e in events if e.type == "exit"]
    assert end["type"] == "exit" and end["state"] == "finished", end
    assert end["result"]["number"] == 1 and end["result"]["state"] == "ready"
    assert (await template(wss, "hello")).state == "ready"


async def test_a_failed_first_build_says_why_and_refuses_creates_naming_the_template(
    wss: mwc.Workspaces,
) -> None:
    failed = await create_template(wss, setup_command="echo broken >&2; exit 3")

    assert (failed.state, failed.build, failed.failed_build) == ("failed", None, 1)
    assert failed.error == "the setup command exited 3: broken"
    with pytest.raises(ConflictError) as refused:
        await wss.create(template="hello")
    assert refused.value.field == "template" and "no good build" in refused.value.message
    # Asked again with the same definition: a new build (the same name, another definition is
    # refused).
    with pytest.raises(ConflictError) as taken:
        await create_template(wss, setup_command="true")
    assert taken.value.field == "name"
    again = await create_template(wss, setup_command="echo broken >&2; exit 3")
    assert again.failed_build == 2


async def test_failed_builds_on_record_are_bounded(wss: mwc.Workspaces) -> None:
    broken = {"setup_command": "exit 1"}
    for _ in range(FAILED_KEPT + 2):
        await create_template(wss, **broken)  # each asks again: one more failed build

    numbers = [b.number for b in await builds(wss, "hello")]
    assert numbers == list(range(3, FAILED_KEPT + 3))


async def test_the_retention_sweep_leaves_a_templates_builds_alone(wss: mwc.Workspaces) -> None:
    await create_template(wss)
    (build,) = await builds(wss, "hello")

    # Long past the retention of ended workspaces (30 days), the build's is still there.
    await sweep(wss, later=60 * 24 * 3600)

    assert await wss.service.driver.list_snapshots(build.workspace_id)
    ws = await wss.create(template="hello")
    assert await files(ws, "hello/README.md") == "# hello\n"


async def test_delete_removes_the_builds_and_their_snapshots(wss: mwc.Workspaces) -> None:
    await create_template(wss)
    (build,) = await builds(wss, "hello")

    deleted = cast(TemplateDeleted, await wss.call("template_delete", name="hello"))

    assert (deleted.deleted, deleted.builds_deleted) == (True, 1)
    assert (await wss.call("template_list")).model_dump()["templates"] == []
    with pytest.raises(NotFoundError):
        await wss.service.driver.list_snapshots(build.workspace_id)
    with pytest.raises(NotFoundError) as missing:
        await wss.create(template="hello")
    assert missing.value.field == "template"
    with pytest.raises(NotFoundError) as again:
        await wss.call("template_delete", name="hello")
    assert again.value.field == "name"


async def test_inputs_are_checked_and_refusals_name_their_field(wss: mwc.Workspaces) -> None:
    for args, field in (
        ({"name": "Hello"}, "name"),
        ({"name": "a/b"}, "name"),
        ({"repository": "https://gitlab.com/octo/hello"}, "repository"),
        ({"ref": "-evil"}, "ref"),
        ({"setup_timeout_seconds": 5}, "setup_timeout_seconds"),
        ({"resources": {"cpu": 1000}}, "resources.cpu"),
    ):
        with pytest.raises(InvalidArgumentError) as refused:
            await create_template(wss, **args)
        assert refused.value.field == field, (args, refused.value)
    with pytest.raises(InvalidArgumentError) as refused:
        await wss.create(template="Bad Name")
    assert refused.value.field == "template"
    with pytest.raises(InvalidArgumentError) as image:
        await wss.create(template="hello", resources={"image_name": "python:3.12"})
    assert image.value.field == "resources.image_name"
    assert (await wss.call("template_list")).model_dump()["templates"] == []


def test_the_check_interval_is_a_setting_off_at_zero_and_at_least_a_minute() -> None:
    name = "MODAL_WORKSPACE_TEMPLATE_CHECK_SECONDS"
    assert load_settings({}).template_check_seconds == CHECK_SECONDS
    assert load_settings({name: "0"}).template_check_seconds == 0
    assert load_settings({name: "60"}).template_check_seconds == 60
    for bad in ("30", "-1", "hourly"):
        with pytest.raises(ConfigError, match=name):
            load_settings({name: bad})
