"""The shared store's contract (`shared_store/interface.py`), held by each implementation: the
SQLite file of the local driver and the Volume of the Modal driver (on the test control plane,
through the real SDK). Two OS processes race on one store: every `create` has exactly one
winner, and no write of either is lost."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_workspace_core.shared_store import SharedStore, SqliteStore

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

RACED_KEYS = 12

# One process of the race: creates every key with its own mark and writes keys of its own,
# then prints the keys it won.
_RACER = """
import asyncio, json, sys
from pathlib import Path

async def main(kind, where, me):
    if kind == "sqlite":
        from modal_workspace_core.shared_store import SqliteStore
        store = SqliteStore(Path(where))
    else:
        from modal_workspace_core.drivers.modal.volume_store import VolumeStore
        store = VolumeStore(where)
    won = []
    for i in range(int(sys.argv[4])):
        if await store.create(f"race/key-{i}", me.encode()):
            won.append(i)
        await store.write(f"own/{me}/key-{i}", me.encode())
    print(json.dumps(won))

asyncio.run(main(*sys.argv[1:4]))
"""


@pytest.fixture(params=["sqlite", "volume"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[SharedStore, str, str]]:
    """The store, its kind and where it is (what a second process opens it by)."""
    if request.param == "sqlite":
        path = tmp_path / "shared.sqlite3"
        yield SqliteStore(path), "sqlite", str(path)
        return
    from modal_workspace_core.drivers.modal.volume_store import VolumeStore

    request.getfixturevalue("modal_control_plane")
    yield VolumeStore("shared-store-test"), "volume", "shared-store-test"


async def test_records_are_read_written_created_and_removed(
    store: tuple[SharedStore, str, str],
) -> None:
    shared = store[0]
    assert await shared.read("a/missing") is None
    assert await shared.names("a") == []
    await shared.write("a/one", b"first")
    await shared.write("a/one", b"second")
    assert await shared.read("a/one") == b"second"
    assert await shared.create("a/two", b"made") is True
    assert await shared.create("a/two", b"again") is False
    assert await shared.read("a/two") == b"made"
    await shared.write("a/deep/x", b"x")
    await shared.write("a/deep/y", b"y")
    assert await shared.names("a") == ["deep", "one", "two"]
    assert await shared.names("a/deep") == ["x", "y"]
    await shared.remove("a/one")
    await shared.remove("a/one")  # already gone: fine
    assert await shared.read("a/one") is None
    await shared.remove("a/deep")
    assert await shared.read("a/deep/x") is None
    assert [n for n in await shared.names("a") if await shared.names(f"a/{n}") or n == "two"] == [
        "two"
    ]
    # A record larger than one of the Volume's blocks comes back whole.
    big = bytes(range(256)) * (9 * 4096)
    await shared.write("a/big", big)
    assert await shared.read("a/big") == big


@pytest.mark.parametrize(
    "key", ["a", "../x", "a/../b", "/a/b", "a/b/", "a//b", "a/.hidden", "a/b c", "a/" + "x" * 161]
)
async def test_a_key_outside_the_shape_is_refused(
    store: tuple[SharedStore, str, str], key: str
) -> None:
    shared = store[0]
    with pytest.raises(ValueError):
        await shared.write(key, b"x")
    with pytest.raises(ValueError):
        await shared.read(key)


async def test_two_processes_racing_lose_nothing_and_agree_on_every_create(
    store: tuple[SharedStore, str, str],
) -> None:
    shared, kind, where = store
    racers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _RACER,
            kind,
            where,
            me,
            str(RACED_KEYS),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for me in ("left", "right")
    ]
    outputs = [await racer.communicate() for racer in racers]
    for racer, (_, err) in zip(racers, outputs, strict=True):
        assert racer.returncode == 0, err.decode()[-2000:]
    won = {
        me: set(json.loads(out)) for me, (out, _) in zip(("left", "right"), outputs, strict=True)
    }
    # Every key has exactly one winner, and the record is the winner's.
    assert won["left"].isdisjoint(won["right"])
    assert won["left"] | won["right"] == set(range(RACED_KEYS))
    for i in range(RACED_KEYS):
        winner = "left" if i in won["left"] else "right"
        assert await shared.read(f"race/key-{i}") == winner.encode()
    for me in ("left", "right"):
        names = await shared.names(f"own/{me}")
        assert names == sorted(f"key-{i}" for i in range(RACED_KEYS))


async def test_the_sqlite_stores_blocking_calls_are_the_same_records(tmp_path: Path) -> None:
    """`read_now` and its kin (for threads already off the loop) see what the async calls
    write and the other way round, and hold the key's shape the same."""
    shared = SqliteStore(tmp_path / "shared.sqlite3")
    assert shared.read_now("b/one") is None and shared.names_now("b") == []
    assert not shared.path.exists()  # reading makes no file
    await shared.write("b/one", b"async")
    assert shared.read_now("b/one") == b"async"
    shared.write_now("b/two", b"blocking")
    assert await shared.read("b/two") == b"blocking"
    assert shared.create_now("b/two", b"again") is False
    assert shared.create_now("b/three", b"made") is True
    shared.write_now("b/f/x", b"x")
    assert shared.names_now("b") == ["f", "one", "three", "two"]
    shared.remove_now("b/f")
    shared.remove_now("b/one")
    assert await shared.names("b") == ["three", "two"]
    for call in (shared.read_now, shared.remove_now):
        with pytest.raises(ValueError):
            call("b/../x")
    with pytest.raises(ValueError):
        shared.write_now("b/x y", b"x")
    with pytest.raises(ValueError):
        shared.names_now("b/")


def test_the_volume_store_keeps_its_records_in_the_volume(
    modal_control_plane: ControlPlane,
) -> None:
    """What the product stores is in Modal's Volume, where any gateway container reads it."""
    from modal_workspace_core.drivers.modal.volume_store import VolumeStore

    async def put() -> None:
        await VolumeStore("kept-here").write("oauth/tokens/abc", b"record")

    asyncio.run(put())
    assert modal_control_plane.volume_files("kept-here") == {"oauth/tokens/abc": b"record"}
