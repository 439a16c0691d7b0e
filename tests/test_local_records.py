"""The local driver's workspace records: kept in the data root's shared store, never in the
workspace's directory; moved there from the `meta.json` an earlier version wrote; changed by
several gateway processes at once without losing a change; gone with the workspace.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from modal_workspace_core import policy
from modal_workspace_core.drivers.base import WorkspaceSpec
from modal_workspace_core.drivers.local.driver import LocalDriver
from modal_workspace_core.drivers.local.store import WorkspaceDir
from modal_workspace_core.errors import NotFoundError
from modal_workspace_core.shared_store import SqliteStore

# Tags each of the two racing processes sets, one call each.
RACED_TAGS = 60

# One gateway process of the race: waits for the other, then sets its own tags one by one.
_TAGGER = """
import asyncio, sys, time
from pathlib import Path
from modal_workspace_core.drivers.local.driver import LocalDriver

async def main(root, workspace_id, me, count):
    driver = LocalDriver(root, isolation="none")
    Path(root, f".ready-{me}").touch()
    deadline = time.monotonic() + 60  # the other may have failed: race alone, then
    while len(list(Path(root).glob(".ready-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    for i in range(int(count)):
        await driver.set_tags(workspace_id, {f"{me}-{i}": str(i)})
    await driver.close()

asyncio.run(main(*sys.argv[1:5]))
"""


@pytest.fixture
async def driver(tmp_path: Path) -> AsyncIterator[LocalDriver]:
    local = LocalDriver(tmp_path / "data")
    try:
        yield local
    finally:
        for record in await local.list():
            await local.destroy(record.workspace_id)
        await local.close()


def stored(data_root: Path, workspace_id: str) -> dict[str, object] | None:
    """The record as the shared store's file holds it, read by a store of the test's own."""
    raw = SqliteStore(data_root / "shared.sqlite3").read_now(f"workspaces/{workspace_id}/record")
    return None if raw is None else json.loads(raw)


async def test_a_created_workspaces_record_is_in_the_shared_store_not_in_its_directory(
    driver: LocalDriver,
) -> None:
    wid = policy.new_id("ws")
    record = await driver.create(wid, WorkspaceSpec(tags={"owner": "alice"}))
    kept = stored(driver.data_root, wid)
    assert kept is not None and kept["workspace_id"] == wid and kept["tags"] == {"owner": "alice"}
    assert await driver.shared_store.names("workspaces") == [wid]
    assert not (driver.data_root / wid / "meta.json").exists()
    # A change is the store's too, and what every read answers.
    await driver.set_tags(wid, {"task": "records"})
    assert (stored(driver.data_root, wid) or {})["tags"] == {"owner": "alice", "task": "records"}
    assert (await driver.get(wid)).tags == {**record.tags, "task": "records"}


async def test_a_meta_json_of_an_earlier_version_moves_into_the_store_once(
    driver: LocalDriver,
) -> None:
    wid = policy.new_id("ws")
    await driver.create(wid, WorkspaceSpec(tags={"owner": "alice"}))
    # What an earlier version left: the record as a file in the directory, none in the store.
    old = driver.records.read_now(wid)
    assert old is not None
    meta_file = driver.data_root / wid / "meta.json"
    meta_file.write_text(json.dumps({**old, "tags": {"owner": "from-the-file"}}))
    driver.records.remove_now(wid)

    restarted = LocalDriver(driver.data_root)
    assert not meta_file.exists()
    assert (stored(driver.data_root, wid) or {})["tags"] == {"owner": "from-the-file"}
    assert (await restarted.get(wid)).tags == {"owner": "from-the-file"}
    assert [r.workspace_id for r in await restarted.list()] == [wid]
    # Once: a file that shows up again later is not read over the store's record.
    meta_file.write_text(json.dumps({**old, "tags": {"owner": "forged"}}))
    LocalDriver(driver.data_root)
    assert not meta_file.exists()
    assert (await restarted.get(wid)).tags == {"owner": "from-the-file"}
    await restarted.close()


async def test_a_meta_json_that_is_a_link_or_not_its_record_is_not_adopted(
    driver: LocalDriver, tmp_path: Path
) -> None:
    forged = tmp_path / "elsewhere.json"
    linked, other = policy.new_id("ws"), policy.new_id("ws")
    for wid in (linked, other):
        WorkspaceDir(driver.data_root / wid).make()
    # Both name `linked`: through a link for it, in a file of another workspace for `other`.
    record = {"workspace_id": linked, "driver": "local", "tags": {}}
    forged.write_text(json.dumps(record))
    (driver.data_root / linked / "meta.json").symlink_to(forged)
    (driver.data_root / other / "meta.json").write_text(json.dumps(record))

    restarted = LocalDriver(driver.data_root)
    assert stored(driver.data_root, linked) is None and stored(driver.data_root, other) is None
    # Left where they are, and read as what a directory without a record is: nothing.
    assert (driver.data_root / linked / "meta.json").is_symlink()
    assert await restarted.list() == []
    for wid in (linked, other):
        with pytest.raises(NotFoundError):
            await restarted.get(wid)
    await restarted.close()


async def test_two_processes_setting_tags_at_once_lose_none(driver: LocalDriver) -> None:
    wid = policy.new_id("ws")
    await driver.create(wid, WorkspaceSpec(tags={"owner": "alice"}))
    taggers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _TAGGER,
            str(driver.data_root),
            wid,
            me,
            str(RACED_TAGS),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for me in ("left", "right")
    ]
    outputs = [await tagger.communicate() for tagger in taggers]
    for tagger, (_, err) in zip(taggers, outputs, strict=True):
        assert tagger.returncode == 0, err.decode()[-2000:]
    expected = {"owner": "alice"} | {
        f"{me}-{i}": str(i) for me in ("left", "right") for i in range(RACED_TAGS)
    }
    tags = (await driver.get(wid)).tags
    assert sorted(set(expected) - set(tags)) == []
    assert tags == expected


async def test_terminating_keeps_the_record_and_purging_removes_it(driver: LocalDriver) -> None:
    kept, gone = policy.new_id("ws"), policy.new_id("ws")
    for wid in (kept, gone):
        await driver.create(wid, WorkspaceSpec())

    await driver.destroy(kept, keep_snapshots=True)
    record = stored(driver.data_root, kept)
    assert record is not None and record["terminated_at"]
    assert [p.name for p in (driver.data_root / kept).iterdir()] == [".lock"]
    assert (await driver.get(kept)).state == "terminated"
    assert kept in [r.workspace_id for r in await driver.list()]

    for wid in (kept, gone):  # the purge of a kept one, and a destroy that keeps nothing
        await driver.destroy(wid)
        assert stored(driver.data_root, wid) is None
        assert not (driver.data_root / wid).exists()
        with pytest.raises(NotFoundError):
            await driver.get(wid)
    assert await driver.shared_store.names("workspaces") == []
    assert await driver.list() == []


async def test_a_directory_without_a_record_is_no_workspace_and_a_record_without_one_goes(
    driver: LocalDriver,
) -> None:
    # A create interrupted before its record was written: not listed, not found.
    interrupted = policy.new_id("ws")
    WorkspaceDir(driver.data_root / interrupted).make()
    assert await driver.list() == []
    with pytest.raises(NotFoundError):
        await driver.get(interrupted)
    # A removal interrupted after its directory went: not found, and dropped at the next start.
    orphan = policy.new_id("ws")
    driver.records.write_now(orphan, {"workspace_id": orphan, "driver": "local", "tags": {}})
    with pytest.raises(NotFoundError):
        await driver.get(orphan)
    restarted = LocalDriver(driver.data_root)
    assert restarted.records.read_now(orphan) is None
    assert (driver.data_root / interrupted).is_dir()  # left as an interrupted create is today
    await restarted.close()
