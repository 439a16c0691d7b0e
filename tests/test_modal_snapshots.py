"""Snapshots, resume, fork and exit snapshots on the Modal driver, against the test control plane
with the real SDK: what goes on the wire (TTL, the V1 calls), every way a snapshot fails, and
every way a sandbox ends (lifetime, terminate from outside, out of memory, a failed start)
leaving its files in an exit snapshot that a resume brings back."""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import modal
import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_control_plane.isolation import usable_bwrap
from modal_control_plane.sandboxes import SandboxRecord
from modal_proto import api_pb2
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.base import (
    LifecycleNote,
    Lineage,
    SnapshotSpec,
    WorkspaceSpec,
    utc_now,
)
from modal_workspace_core.drivers.modal import records
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings
from modal_workspace_core.errors import (
    ConflictError,
    InvalidArgumentError,
    LimitError,
    NotFoundError,
    UpstreamError,
)
from modal_workspace_core.policy import new_id
from modal_workspace_core.surfaces.python_client import Workspaces
from support.agent_exec import run

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

ECHO_AGENT = Path(__file__).parent / "modal_control_plane" / "echo_agent.py"
IMAGE = "snapshot-test-image"
Status = api_pb2.GenericResult


def _settings(**overrides: object) -> ModalSettings:
    values: dict[str, object] = {
        "app_name": "snapshot-tests",
        "agent_command": (sys.executable, str(ECHO_AGENT)),
        "allowed_gpus": ("T4",),
        "default_image_name": IMAGE,
    }
    values.update(overrides)
    return ModalSettings(**values)  # type: ignore[arg-type]


@pytest.fixture
async def driver(modal_control_plane: ControlPlane) -> AsyncIterator[ModalDriver]:
    modal_control_plane.publish_image(IMAGE, "im-snapshottestimage000")
    driver = ModalDriver(_settings())
    yield driver
    await driver.close()


def _sandbox(plane: ControlPlane, workspace_id: str) -> SandboxRecord:
    """The workspace's newest sandbox as the control plane keeps it."""
    return max((s for s in plane.sandboxes() if s.name == workspace_id), key=lambda s: s.created_at)


def _spec(ttl_seconds: int | None = None, label: str = "") -> SnapshotSpec:
    return SnapshotSpec(snapshot_id=new_id("sn"), ttl_seconds=ttl_seconds, label=label)


async def _ended(driver: ModalDriver, workspace_id: str, timeout: float = 30) -> None:
    async def wait() -> None:
        while (await driver.get(workspace_id)).state == "running":
            await asyncio.sleep(0.2)

    await asyncio.wait_for(wait(), timeout)


async def test_a_snapshot_is_kept_until_deleted_unless_given_a_ttl_and_its_record_is_internal(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec(tags={"team": "qa"}))

    kept = await driver.snapshot(ws, _spec(label="kept"))
    timed = await driver.snapshot(ws, _spec(ttl_seconds=3600))

    assert kept.expires_at is None and kept.label == "kept" and kept.kind == "manual"
    assert timed.expires_at is not None
    assert kept.tags == {"team": "qa"}
    images = modal_control_plane.call(lambda: dict(modal_control_plane.state.images))
    wire = {i.wire_ttl for i in images.values() if i.snapshot is not None}
    # TTL None goes on the wire as the SDK's "no expiry" sentinel, never its 30-day default.
    assert wire == {-1, 3600}
    listed = await driver.list_snapshots(ws)
    assert [s.snapshot_id for s in listed] == [kept.snapshot_id, timed.snapshot_id]
    # The records live in the sandbox's tags, out of the workspace's own view of them.
    record = await driver.get(ws)
    assert not any(k.startswith("mwc-") for k in record.tags)
    assert any(k.startswith("mwc-sn-") for k in _sandbox(modal_control_plane, ws).tags)
    with pytest.raises(InvalidArgumentError):
        await driver.set_tags(ws, {"mwc-sn-forged": "x"})


async def test_a_snapshot_that_overruns_its_deadline_records_nothing(
    modal_control_plane: ControlPlane,
) -> None:
    modal_control_plane.publish_image(IMAGE, "im-snapshottestimage000")
    driver = ModalDriver(_settings(snapshot_timeout_seconds=1))
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec())
    modal_control_plane.snapshot_faults(delay=4)
    spec = _spec()

    with pytest.raises(UpstreamError) as refused:
        await driver.snapshot(ws, spec)

    assert spec.snapshot_id in refused.value.message and "1 s" in refused.value.message
    assert await driver.list_snapshots(ws) == []
    await driver.close()


async def test_a_sandbox_that_ends_during_a_snapshot_is_a_conflict_and_its_exit_snapshot_counts(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec())
    (_sandbox(modal_control_plane, ws).directory / "workspace" / "a.txt").write_text("kept")
    modal_control_plane.snapshot_faults(end_sandbox=True)

    with pytest.raises(ConflictError) as refused:
        await driver.snapshot(ws, _spec())

    assert "ended while snapshot" in refused.value.message
    record = await driver.get(ws)
    assert record.state == "suspended" and record.suspension is not None
    assert record.suspension.reason == "terminated"
    (only,) = await driver.list_snapshots(ws)
    assert only.kind == "exit" and only.snapshot_id == record.suspension.snapshot_id


async def test_an_image_that_expired_at_modal_is_refused_by_name_and_nothing_changes(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec())
    snapshot = await driver.snapshot(ws, _spec(ttl_seconds=3600))
    modal_control_plane.expire_snapshots()
    before = len(modal_control_plane.sandboxes())

    with pytest.raises(ConflictError) as resume:
        await driver.resume(ws, snapshot)
    with pytest.raises(ConflictError) as fork:
        await driver.fork(
            snapshot, new_id("ws"), WorkspaceSpec(), _lineage(ws, snapshot.snapshot_id)
        )

    for refused in (resume, fork):
        assert f"snapshot {snapshot.snapshot_id} cannot be opened" in refused.value.message
    assert len(modal_control_plane.sandboxes()) == before
    assert (await driver.get(ws)).state == "running"  # the resume ended nothing


def _lineage(parent: str, snapshot_id: str) -> Lineage:
    return Lineage(parent_workspace_id=parent, snapshot_id=snapshot_id, forked_at=utc_now())


async def test_a_terminate_from_outside_the_gateway_suspends_with_an_exit_snapshot_to_resume(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec(tags={"team": "qa"}))
    first = _sandbox(modal_control_plane, ws)
    (first.directory / "workspace" / "notes.txt").write_text("written before the end")
    # As the dashboard or `modal sandbox terminate` would: not through the gateway.
    await (await modal.Sandbox.from_name.aio("snapshot-tests", ws)).terminate.aio()

    record = await driver.get(ws)

    assert record.state == "suspended" and record.suspension is not None
    assert record.suspension.reason == "terminated"
    (exit_snapshot,) = await driver.list_snapshots(ws)
    assert exit_snapshot.kind == "exit"
    assert exit_snapshot.snapshot_id == record.suspension.snapshot_id
    assert modal_control_plane.calls()["SandboxGetExitSnapshotV2"] == 1
    # Seen again (another gateway, a later call): recorded once.
    assert (await driver.get(ws)).suspension == record.suspension
    assert modal_control_plane.calls()["SandboxGetExitSnapshotV2"] == 1

    resumed = await driver.resume(ws, exit_snapshot)

    assert resumed.state == "running" and resumed.tags["team"] == "qa"
    second = _sandbox(modal_control_plane, ws)
    assert second.sandbox_id != first.sandbox_id and second.running
    assert (second.directory / "workspace" / "notes.txt").read_text() == "written before the end"
    assert second.exit_snapshot_enabled
    assert (await driver.get(ws)).suspension is None


async def test_a_short_lifetime_ends_in_a_suspension_whose_exit_snapshot_resumes_the_file(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    ws = new_id("ws")
    # Below the API's minimum (60 s): the driver itself takes any whole number of seconds.
    await driver.create(ws, WorkspaceSpec(resources={"timeout_seconds": 3}))
    sandbox = await modal.Sandbox.from_name.aio("snapshot-tests", ws)
    wrote = await sandbox.exec.aio("sh", "-c", "echo from a command > /workspace/out.txt")
    assert await wrote.wait.aio() == 0

    await _ended(driver, ws)

    record = await driver.get(ws)
    assert record.state == "suspended" and record.suspension is not None
    assert record.suspension.reason == "lifetime"
    (exit_snapshot,) = await driver.list_snapshots(ws)
    assert exit_snapshot.snapshot_id == record.suspension.snapshot_id
    await driver.resume(ws, exit_snapshot)
    restored = _sandbox(modal_control_plane, ws)
    assert (restored.directory / "workspace" / "out.txt").read_text() == "from a command\n"
    assert restored.definition.timeout_secs == 3  # the workspace's own options again


async def test_out_of_memory_and_a_failed_start_say_why(
    modal_control_plane: ControlPlane,
) -> None:
    modal_control_plane.publish_image(IMAGE, "im-snapshottestimage000")
    driver = ModalDriver(_settings())
    oom = new_id("ws")
    await driver.create(oom, WorkspaceSpec())
    modal_control_plane.end_sandbox(
        _sandbox(modal_control_plane, oom).sandbox_id, Status.GENERIC_STATUS_KERNEL_OOM_KILL
    )
    record = await driver.get(oom)
    assert record.suspension is not None and record.suspension.reason == "out_of_memory"
    assert record.suspension.snapshot_id is not None

    # An agent that reads its launch configuration, complains and exits.
    failing = (
        sys.executable,
        "-c",
        "import sys; sys.stdin.read(); print('line one', file=sys.stderr); "
        "print('mwc-agent: cannot open /run/mwc/state', file=sys.stderr); sys.exit(3)",
    )
    broken = ModalDriver(_settings(agent_command=failing))
    ws = new_id("ws")
    await broken.create(ws, WorkspaceSpec())
    await _ended(broken, ws)
    record = await broken.get(ws)
    assert record.suspension is not None and record.suspension.reason == "failed_to_start"
    assert "code 3" in record.suspension.detail
    assert "cannot open /run/mwc/state" in record.suspension.detail
    await driver.close()
    await broken.close()


async def test_a_gpu_workspace_goes_through_the_v1_calls_and_is_found_after_its_end(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec(resources={"gpu": "T4"}))
    (_sandbox(modal_control_plane, ws).directory / "workspace" / "gpu.txt").write_text("v1")
    manual = await driver.snapshot(ws, _spec())
    modal_control_plane.end_sandbox(
        _sandbox(modal_control_plane, ws).sandbox_id, Status.GENERIC_STATUS_TIMEOUT
    )

    record = await driver.get(ws)

    assert record.state == "suspended" and record.suspension is not None
    assert record.suspension.reason == "lifetime"
    kinds = [s.kind for s in await driver.list_snapshots(ws)]
    assert kinds == ["manual", "exit"]
    calls = modal_control_plane.calls()
    assert calls["SandboxCreate"] == 1 and calls["SandboxGetExitSnapshot"] == 1
    assert calls["SandboxTagsSet"] >= 2  # the V1 tag calls hold the records

    await driver.resume(ws, manual)
    restored = _sandbox(modal_control_plane, ws)
    assert restored.version == 1 and restored.running
    assert (restored.directory / "workspace" / "gpu.txt").read_text() == "v1"
    assert modal_control_plane.calls()["SandboxCreate"] == 2


async def test_terminate_keeps_or_purges_and_list_sees_every_state_from_the_list_alone(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    running, suspended, kept, purged = (new_id("ws") for _ in range(4))
    for ws in (running, suspended, kept, purged):
        await driver.create(ws, WorkspaceSpec())
    await driver.suspend(suspended, "idle", None)
    snapshot = await driver.snapshot(kept, _spec())
    await driver.destroy(kept, keep_snapshots=True)
    gone = await driver.snapshot(purged, _spec())
    image_id = records.snapshots(purged, _sandbox(modal_control_plane, purged).tags)[0].image_id
    await driver.destroy(purged)
    before = modal_control_plane.calls()

    states = {r.workspace_id: r.state for r in await driver.list()}

    assert states == {running: "running", suspended: "suspended", kept: "terminated"}
    used = modal_control_plane.calls() - before
    # One page and the empty one that ends the list; the tags come with it, none read apart.
    assert used["SandboxListV2"] == 2 and used["SandboxTagsGetV2"] == 0
    assert (await driver.get(kept)).ended_at is not None
    assert [s.snapshot_id for s in await driver.list_snapshots(kept)] == [snapshot.snapshot_id]
    with pytest.raises(NotFoundError):
        await driver.destroy(kept, keep_snapshots=True)  # already terminated
    with pytest.raises(NotFoundError):
        await driver.get(purged)
    # A purge deletes the snapshot images at Modal too (kept until deleted: they would cost).
    assert modal_control_plane.image(image_id) is None and gone.snapshot_id
    with pytest.raises(ConflictError):
        await driver.suspend(suspended, "idle", None)
    await driver.destroy(kept)
    with pytest.raises(NotFoundError):
        await driver.list_snapshots(kept)


async def test_snapshots_per_workspace_are_bounded_and_deleting_one_frees_its_place(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec())
    taken = [await driver.snapshot(ws, _spec()) for _ in range(records.MAX_SNAPSHOTS)]

    with pytest.raises(LimitError) as refused:
        await driver.snapshot(ws, _spec())
    assert refused.value.code == "limit"
    before = modal_control_plane.calls()["TaskSnapshotFilesystem"]
    assert before == records.MAX_SNAPSHOTS  # refused before Modal made an image

    await driver.delete_snapshot(ws, taken[0].snapshot_id)
    with pytest.raises(NotFoundError):
        await driver.delete_snapshot(ws, taken[0].snapshot_id)
    await driver.snapshot(ws, _spec())
    assert len(await driver.list_snapshots(ws)) == records.MAX_SNAPSHOTS
    assert max(len(v) for v in _sandbox(modal_control_plane, ws).tags.values()) <= (
        records.MAX_RECORD_CHARS
    )


async def test_a_fork_has_its_lineage_its_parents_files_and_no_exec_history(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    parent = new_id("ws")
    await driver.create(parent, WorkspaceSpec(resources={"cpu": 1.5}, tags={"team": "qa"}))
    directory = _sandbox(modal_control_plane, parent).directory
    (directory / "workspace" / "shared.txt").write_text("from the parent")
    (directory / "run" / "mwc" / "state").mkdir(parents=True, exist_ok=True)
    (directory / "run" / "mwc" / "state" / "exec-1.json").write_text("{}")
    snapshot = await driver.snapshot(parent, _spec())
    parent_record = await driver.get(parent)
    child = new_id("ws")
    spec = WorkspaceSpec(tags={"team": "qa"}, resources=dict(parent_record.resources))

    forked = await driver.fork(snapshot, child, spec, _lineage(parent, snapshot.snapshot_id))

    assert forked.lineage is not None and forked.lineage.parent_workspace_id == parent
    got = await driver.get(child)
    assert got.lineage == forked.lineage and got.resources["cpu"] == [1.5, 4.0]
    assert "secret_names" not in got.resources and "image_name" not in got.resources
    fork_dir = _sandbox(modal_control_plane, child).directory
    assert (fork_dir / "workspace" / "shared.txt").read_text() == "from the parent"

    async def cleared() -> None:
        while (fork_dir / "run" / "mwc" / "state" / "exec-1.json").exists():
            await asyncio.sleep(0.1)

    await asyncio.wait_for(cleared(), 10)
    assert _sandbox(modal_control_plane, child).running  # the agent started after clearing
    assert (await driver.get(parent)).lineage is None
    assert await driver.list_snapshots(child) == []


async def test_notes_are_kept_on_the_workspace_bounded_and_across_its_end(
    driver: ModalDriver,
) -> None:
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec())
    for i in range(30):
        await driver.note(ws, LifecycleNote(at=utc_now(), action="snapshot", detail=f"n{i}"))
    await driver.suspend(ws, "idle", None)
    await driver.note(ws, LifecycleNote(at=utc_now(), action="suspended", detail="last"))

    notes = (await driver.get(ws)).lifecycle

    assert 1 < len(notes) <= 20 and notes[-1].detail == "last"
    await driver.note(new_id("ws"), LifecycleNote(at=utc_now(), action="x"))  # ignored


@pytest.mark.skipif(
    not usable_bwrap(), reason="bubblewrap does not work here (.ci/run installs it)"
)
async def test_after_a_lifetime_end_the_next_call_resumes_with_files_and_exec_history(
    modal_control_plane: ControlPlane, tmp_path: Path
) -> None:
    """The real agent, through the service: a lifetime that ends while a command runs leaves
    the files and the agent's exec history in the exit snapshot; the next exec resumes the
    workspace transparently, the earlier exec's log reads back and the running one is lost."""
    modal_control_plane.publish_image(IMAGE, "im-snapshottestimage000")
    settings = load_settings(
        {"MODAL_WORKSPACE_DRIVER": "modal", "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "d")}
    )
    driver = ModalDriver(ModalSettings(app_name="snapshot-tests", default_image_name=IMAGE))
    async with Workspaces(driver, settings=settings) as wss:
        ws = await wss.create()
        printed = await ws.exec("echo the log of an exec > /dev/stderr; echo kept > out.txt")
        running = await ws.realtime_exec_start("sleep 600")
        modal_control_plane.end_sandbox(
            _sandbox(modal_control_plane, ws.id).sandbox_id, Status.GENERIC_STATUS_TIMEOUT
        )

        info = await ws.refresh()
        assert info.state == "suspended"
        listed = cast(Any, await wss.call("workspace_snapshot_list", workspace_id=ws.id))
        assert [s.kind for s in listed.snapshots] == ["exit"]

        again = await ws.exec("cat out.txt")

        assert again.stdout == "kept\n"
        assert (await ws.refresh()).state == "running"
        log = cast(Any, await ws.realtime_exec_events(printed.exec_id))
        assert "the log of an exec" in json.dumps([e.model_dump() for e in log.events])
        status = cast(Any, await ws.realtime_exec_status(running.exec_id))
        assert status.state == "lost"
    await driver.close()


@pytest.mark.skipif(
    not usable_bwrap(), reason="bubblewrap does not work here (.ci/run installs it)"
)
async def test_a_resume_reattaches_the_secret_env_by_id_and_a_fork_does_not_get_it(
    modal_control_plane: ControlPlane,
) -> None:
    """The real agent: values given as `secret_env` are in a resumed workspace's commands (and
    still redacted there), never in a fork's, and never in a tag, a name or an argv."""
    modal_control_plane.publish_image(IMAGE, "im-snapshottestimage000")
    driver = ModalDriver(ModalSettings(app_name="snapshot-tests", default_image_name=IMAGE))
    value = "s3cret-" + secrets.token_hex(12)
    digest = hashlib.sha256(value.encode()).hexdigest()
    # Neither command holds the value: one prints its digest, one the variable as output shows it.
    show = 'printf %s "${API_TOKEN-unset}" | sha256sum; echo "${API_TOKEN-unset}"'

    async def seen(workspace_id: str) -> list[str]:
        client = await driver.connect(workspace_id)
        try:
            done = await run(client, show)
        finally:
            await client.close()
        assert done.exit["returncode"] == 0, done.stderr
        return [done.stdout.split()[0], done.stdout.splitlines()[1]]

    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec(secret_env={"API_TOKEN": value}))
    assert (await seen(ws))[0] == digest
    snapshot = await driver.snapshot(ws, _spec())
    await driver.suspend(ws, "idle", snapshot.snapshot_id)

    await driver.resume(ws, snapshot)

    resumed_digest, printed = await seen(ws)
    assert resumed_digest == digest
    assert value not in printed and "REDACTED" in printed
    child = new_id("ws")
    await driver.fork(snapshot, child, WorkspaceSpec(), _lineage(ws, snapshot.snapshot_id))
    assert (await seen(child))[1] == "unset"
    assert records.TAG_SECRET_ENV not in _sandbox(modal_control_plane, child).tags

    made = modal_control_plane.call(lambda: list(modal_control_plane.state.sandboxes.values()))
    assert len([s for s in made if s.name == ws]) == 2
    for sandbox in made:
        recorded = [
            sandbox.name,
            json.dumps(sandbox.tags),
            str(sandbox.definition),
            *(arg for e in sandbox.execs.values() for arg in e.argv),
        ]
        assert not any(value in text for text in recorded), sandbox.name

    # The workspace's one Secret is the only place the value is kept, and a purge deletes it.
    def holding() -> list[str]:
        kept = modal_control_plane.call(lambda: dict(modal_control_plane.state.secret_ids))
        return [secret_id for secret_id, env in kept.items() if value in env.values()]

    assert len(holding()) == 1
    await driver.destroy(ws)
    assert holding() == []
    await driver.destroy(child)
    await driver.close()


async def test_a_resume_whose_secret_env_secret_is_gone_changes_nothing(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    value = "s3cret-gone"
    ws = new_id("ws")
    await driver.create(ws, WorkspaceSpec(secret_env={"API_TOKEN": value}))
    snapshot = await driver.snapshot(ws, _spec())
    before = _sandbox(modal_control_plane, ws)
    stored = records.secret_env(before.tags)
    assert stored is not None and stored.keys == ("API_TOKEN",)
    modal_control_plane.call(lambda: modal_control_plane.state.secret_ids.pop(stored.secret_id))

    with pytest.raises(UpstreamError) as refused:
        await driver.resume(ws, snapshot)

    assert refused.value.field == "secret_env" and stored.secret_id in refused.value.message
    assert "nothing was changed" in refused.value.message
    assert value not in refused.value.message
    assert _sandbox(modal_control_plane, ws) is before and before.running
