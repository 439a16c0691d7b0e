"""Volumes on the local Modal control plane, through the real SDK's remote file API (what the
gateway keeps durable state with): `read_file`, `batch_upload`, `listdir`, `remove_file`, block
bytes over the plane's HTTP block server, and exclusive creates that stay atomic under races."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import time
from typing import Any

import aiohttp
import modal
import modal.exception
import pytest
from grpclib.client import Channel
from modal._utils.blob_utils import BLOCK_SIZE
from modal.volume import _expected_block_lengths
from modal_control_plane import ControlPlane, modal_control_plane
from modal_proto import api_grpc, api_pb2

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

NAME = "mwc-state"


def _volume(client: modal.Client | None = None) -> modal.Volume:
    return modal.Volume.from_name(NAME, create_if_missing=True, version=2, client=client)


async def _put(vol: modal.Volume, files: dict[str, bytes], *, force: bool = False) -> None:
    async with vol.batch_upload.aio(force=force) as batch:
        for path, data in files.items():
            batch.put_file(io.BytesIO(data), path)


async def _call(plane: ControlPlane, method: str, request: Any) -> Any:
    """One raw RPC to the plane, as the SDK would send it: for fields the SDK's API leaves out
    (ranges, max_entries). A unary-stream call answers the list of its messages."""
    env = plane.sdk_env()
    metadata = {
        "x-modal-token-id": env["MODAL_TOKEN_ID"],
        "x-modal-token-secret": env["MODAL_TOKEN_SECRET"],
    }
    channel = Channel("127.0.0.1", plane.port)
    try:
        return await getattr(api_grpc.ModalClientStub(channel), method)(request, metadata=metadata)
    finally:
        channel.close()


async def _read(vol: modal.Volume, path: str) -> bytes:
    return b"".join([chunk async for chunk in vol.read_file.aio(path)])


async def test_a_small_file_round_trips_in_a_v2_volume(modal_control_plane: ControlPlane) -> None:
    vol = _volume()

    await _put(vol, {"/clients/one.json": b'{"client_id": "one"}'})

    assert await _read(vol, "clients/one.json") == b'{"client_id": "one"}'
    assert await _read(vol, "/clients/one.json") == b'{"client_id": "one"}'
    assert modal_control_plane.volume_files(NAME) == {"clients/one.json": b'{"client_id": "one"}'}
    record = modal_control_plane.volume(NAME)
    assert record is not None
    assert record.requested_versions == [api_pb2.VOLUME_FS_VERSION_V2]
    assert record.files["clients/one.json"].mode == 0o644
    calls = modal_control_plane.calls()
    # The first put learns the block is missing, uploads it, and puts again.
    assert (calls["VolumePutFiles2"], calls["BlockPut"]) == (2, 1)
    assert (calls["VolumeGetFile2"], calls["BlockGet"]) == (2, 2)


async def test_a_file_of_several_blocks_round_trips_zero_runs_and_all(
    modal_control_plane: ControlPlane,
) -> None:
    # Block 0 ends in zeros (uploaded without them), block 1 is all zeros (an empty upload),
    # block 2 is short: the SDK pads what the plane serves back to each block's length.
    data = os.urandom(1000) + bytes(2 * BLOCK_SIZE - 1000) + os.urandom(3000)
    vol = _volume()

    await _put(vol, {"big.bin": data})

    assert await _read(vol, "big.bin") == data
    assert modal_control_plane.volume_files(NAME) == {"big.bin": data}
    assert modal_control_plane.calls()["BlockGet"] == 3
    # An unchanged file puts again without uploading a byte: its blocks are known.
    await _put(vol, {"copy.bin": data})
    assert modal_control_plane.calls()["BlockPut"] == 3


async def test_a_range_read_gets_the_blocks_it_overlaps_sliced_to_the_range(
    modal_control_plane: ControlPlane,
) -> None:
    data = os.urandom(BLOCK_SIZE + 500)
    vol = _volume()
    await _put(vol, {"big.bin": data})

    async def read_range(start: int, length: int, *, pads: bool = True) -> bytes:
        response = await _call(
            modal_control_plane,
            "VolumeGetFile2",
            api_pb2.VolumeGetFile2Request(
                volume_id=vol.object_id,
                path="big.bin",
                start=start,
                len=length,
                client_pads_blocks=pads,
            ),
        )
        lengths = _expected_block_lengths(response.start, response.len, len(response.get_urls))
        async with aiohttp.ClientSession() as session:
            bodies = []
            for url, expected in zip(response.get_urls, lengths, strict=True):
                async with session.get(url) as got:
                    assert got.status == 200
                    bodies.append((await got.read()).ljust(expected, b"\0"))
        return b"".join(bodies)

    assert await read_range(BLOCK_SIZE - 10, 20) == data[BLOCK_SIZE - 10 : BLOCK_SIZE + 10]
    assert await read_range(BLOCK_SIZE + 100, 0, pads=False) == data[BLOCK_SIZE + 100 :]
    assert await read_range(5, 10) == data[5:15]
    assert await read_range(len(data) + 10, 5) == b""


async def test_reading_a_missing_file_or_a_directory_is_file_not_found(
    modal_control_plane: ControlPlane,
) -> None:
    vol = _volume()
    await _put(vol, {"tokens/a.json": b"{}"})

    with pytest.raises(FileNotFoundError):
        await _read(vol, "tokens/missing.json")
    with pytest.raises(FileNotFoundError):
        await _read(vol, "tokens")


async def test_an_exclusive_put_of_an_existing_path_fails_and_writes_nothing(
    modal_control_plane: ControlPlane,
) -> None:
    vol = _volume()
    await _put(vol, {"clients/one.json": b"old"})

    with pytest.raises(FileExistsError):
        await _put(vol, {"clients/new.json": b"new", "/clients/one.json": b"replaced"})

    assert modal_control_plane.volume_files(NAME) == {"clients/one.json": b"old"}


async def test_a_forced_put_replaces_the_file(modal_control_plane: ControlPlane) -> None:
    vol = _volume()
    await _put(vol, {"clients/one.json": b"old, and longer than the new"})

    await _put(vol, {"clients/one.json": b"new"}, force=True)

    assert await _read(vol, "clients/one.json") == b"new"
    # A directory is never replaced by a file, forced or not.
    with pytest.raises(FileExistsError):
        await _put(vol, {"clients": b"x"}, force=True)


async def test_listdir_lists_a_folder_directly_or_recursively_and_fails_for_a_missing_one(
    modal_control_plane: ControlPlane,
) -> None:
    vol = _volume()
    before = int(time.time())
    await _put(vol, {"oauth/clients/a.json": b"aa", "oauth/tokens.json": b"ttt", "top": b""})

    listed = await vol.listdir.aio("/oauth")
    assert [(e.path, e.type, e.size) for e in listed] == [
        ("oauth/clients", modal.volume.FileEntryType.DIRECTORY, 0),
        ("oauth/tokens.json", modal.volume.FileEntryType.FILE, 3),
    ]
    assert all(before <= e.mtime <= time.time() + 1 for e in listed)
    everything = await vol.listdir.aio("/", recursive=True)
    assert [e.path for e in everything] == [
        "oauth",
        "oauth/clients",
        "oauth/clients/a.json",
        "oauth/tokens.json",
        "top",
    ]
    assert [e.path for e in await vol.listdir.aio("oauth/tokens.json")] == ["oauth/tokens.json"]
    with pytest.raises(modal.exception.NotFoundError):
        await vol.listdir.aio("/nowhere")
    # max_entries caps a listing (the SDK does not send it; the service honours it).
    request = api_pb2.VolumeListFiles2Request(
        volume_id=vol.object_id, path="/", recursive=True, max_entries=2
    )
    batches = await _call(modal_control_plane, "VolumeListFiles2", request)
    assert [e.path for b in batches for e in b.entries] == ["oauth", "oauth/clients"]


async def test_remove_file_removes_files_and_directories_only_when_recursive(
    modal_control_plane: ControlPlane,
) -> None:
    vol = _volume()
    await _put(vol, {"a/one": b"1", "a/b/two": b"2", "keep": b"k"})

    await vol.remove_file.aio("a/one")
    with pytest.raises(FileNotFoundError):
        await vol.remove_file.aio("a/one")
    with pytest.raises(modal.exception.InvalidError):
        await vol.remove_file.aio("a")
    assert modal_control_plane.volume_files(NAME) == {"a/b/two": b"2", "keep": b"k"}

    await vol.remove_file.aio("/a", recursive=True)

    assert modal_control_plane.volume_files(NAME) == {"keep": b"k"}
    assert [e.path for e in await vol.listdir.aio("/", recursive=True)] == ["keep"]


async def test_paths_with_dot_dot_are_refused(modal_control_plane: ControlPlane) -> None:
    vol = _volume()

    with pytest.raises(modal.exception.InvalidError):
        await _put(vol, {"../escape": b"x"})
    with pytest.raises(modal.exception.InvalidError):
        await _read(vol, "a/../b")


async def test_deleting_a_volume_drops_it_and_its_files(modal_control_plane: ControlPlane) -> None:
    await _put(_volume(), {"f": b"x"})

    await modal.Volume.objects.delete.aio(NAME)

    assert modal_control_plane.volume(NAME) is None
    with pytest.raises(modal.exception.NotFoundError):
        await modal.Volume.from_name(NAME).hydrate.aio()
    # Created again, it starts empty.
    with pytest.raises(FileNotFoundError):
        await _read(_volume(), "f")


async def test_the_block_server_wants_its_token_the_right_digest_and_a_known_block(
    modal_control_plane: ControlPlane,
) -> None:
    vol = _volume()
    await _put(vol, {"f": b"stored"})
    response = await _call(
        modal_control_plane,
        "VolumeGetFile2",
        api_pb2.VolumeGetFile2Request(volume_id=vol.object_id, path="f"),
    )
    (url,) = response.get_urls
    token = url.split("/")[4]
    unknown = hashlib.sha256(b"never uploaded").hexdigest()

    async with aiohttp.ClientSession() as session:
        async with session.get(url) as got:
            assert (got.status, await got.read()) == (200, b"stored")
        async with session.get(url.replace(token, "not-the-token")) as got:
            assert got.status == 403
        async with session.get(url.split("/blocks/")[0] + f"/blocks/{token}/{unknown}") as got:
            assert got.status == 404
        async with session.put(url.split("?")[0], data=b"other bytes") as got:
            assert got.status == 400


async def test_racing_exclusive_creates_of_one_path_have_exactly_one_winner(
    modal_control_plane: ControlPlane,
) -> None:
    env = modal_control_plane.sdk_env()
    clients = [
        await modal.Client.from_credentials.aio(env["MODAL_TOKEN_ID"], env["MODAL_TOKEN_SECRET"])
        for _ in range(20)
    ]
    try:
        volumes = [_volume(client) for client in clients]
        for vol in volumes:
            await vol.hydrate.aio()
        for round_ in range(10):
            path = f"workspaces/ws-{round_}.json"

            async def create(racer: int, vol: modal.Volume, path: str = path) -> int | None:
                try:
                    await _put(vol, {path: f"racer {racer}".encode()})
                except FileExistsError:
                    return None
                return racer

            results = await asyncio.gather(*(create(i, v) for i, v in enumerate(volumes)))

            winners = [r for r in results if r is not None]
            assert len(winners) == 1, f"round {round_}: winners {winners}"
            stored = modal_control_plane.volume_files(NAME)[path]
            assert stored == f"racer {winners[0]}".encode()
    finally:
        for client in clients:
            await client.close.aio()
