"""The Modal driver against the local control plane, with the real `modal` SDK making every call:
workspaces as named, tagged sandboxes with the agent as entrypoint, lookups without listing,
allowlists enforced before any Modal call, snapshots, and the agent channel over one exec."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from pathlib import Path

import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_workspace_core import policy
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.base import Lineage, SnapshotSpec, WorkspaceSpec
from modal_workspace_core.drivers.modal import records
from modal_workspace_core.drivers.modal.channel import ExecChannel
from modal_workspace_core.drivers.modal.driver import MANAGED_BY, ModalDriver, ModalSettings
from modal_workspace_core.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UpstreamError,
)
from modal_workspace_core.policy import new_id

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

ECHO_AGENT = Path(__file__).parent / "modal_control_plane" / "echo_agent.py"
# Reused by every workspace: the image choice itself is tested on its own below.
IMAGE = "workspace-test-image"


def _settings(**overrides: object) -> ModalSettings:
    values: dict[str, object] = {
        "app_name": "driver-tests",
        "agent_command": (sys.executable, str(ECHO_AGENT)),
        "allowed_secrets": ("github", "openai"),
        "allowed_volumes": ("cache",),
        "allowed_gpus": ("T4",),
        "default_image_name": IMAGE,
    }
    values.update(overrides)
    return ModalSettings(**values)  # type: ignore[arg-type]


def _configured_wheel(path: Path) -> Path | None:
    """The wheel as the gateway's settings read it from MODAL_WORKSPACE_WHEEL."""
    modal = load_settings({"MODAL_WORKSPACE_WHEEL": str(path)}, driver="modal").modal
    assert modal is not None
    return modal.wheel


@pytest.fixture
async def driver(modal_control_plane: ControlPlane):  # type: ignore[no-untyped-def]
    modal_control_plane.publish_image(IMAGE, "im-workspacetestimage00")
    driver = ModalDriver(_settings())
    yield driver
    await driver.close()


def _since(before: Counter[str], after: Counter[str]) -> Counter[str]:
    return Counter({k: v - before[k] for k, v in after.items() if v - before[k]})


class Received:
    """What a channel's transport pushes, gathered for a test to take in order."""

    def __init__(self, channel: ExecChannel) -> None:
        self.data = bytearray()
        self.ends: list[Exception | None] = []
        self._arrived = asyncio.Event()
        assert channel.transport.attach(self._on_data, self._on_lost)

    def _on_data(self, view: memoryview) -> None:
        assert not self.ends, "data after the end"
        self.data += view
        self._arrived.set()

    def _on_lost(self, exc: Exception | None) -> None:
        self.ends.append(exc)
        self._arrived.set()

    async def exactly(self, n: int, timeout: float) -> bytes:
        async def arrived() -> None:
            while len(self.data) < n:
                assert not self.ends, "the output ended early"
                self._arrived.clear()
                await self._arrived.wait()

        await asyncio.wait_for(arrived(), timeout)
        taken = bytes(self.data[:n])
        del self.data[:n]
        return taken


async def test_create_starts_a_named_sandbox_running_the_agent_daemon(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    workspace_id = new_id("ws")

    record = await driver.create(workspace_id, WorkspaceSpec(tags={"team": "a"}))

    assert record.state == "running"
    assert record.root == "/workspace"
    assert record.tags["managed-by"] == MANAGED_BY
    assert record.tags["workspace-id"] == workspace_id
    assert record.tags["workspace-root"] == "/workspace"
    assert record.tags["team"] == "a"
    (sandbox,) = modal_control_plane.sandboxes()
    assert sandbox.name == workspace_id
    assert list(sandbox.definition.entrypoint_args) == [
        sys.executable,
        str(ECHO_AGENT),
        "daemon",
        "--root",
        "/workspace",
        "--state-dir",
        "/run/mwc/state",
        "--socket",
        "/run/mwc/agent.sock",
        "--config",
        "-",
    ]
    # The channel key reached the daemon on its stdin, never its argv or environment.
    assert sandbox.entrypoint is not None and sandbox.entrypoint.stdin_closed
    key = driver._channel_key(workspace_id)
    assert key not in " ".join(sandbox.definition.entrypoint_args)
    assert key not in str(sandbox.env)
    assert sandbox.definition.workdir == "/workspace"


async def test_resources_default_to_the_predecessors_values(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    await driver.create(new_id("ws"), WorkspaceSpec())

    (sandbox,) = modal_control_plane.sandboxes()
    resources = sandbox.definition.resources
    assert (resources.milli_cpu, resources.milli_cpu_max) == (2000, 4000)
    assert (resources.memory_mb, resources.memory_mb_max) == (4096, 8192)
    assert sandbox.definition.timeout_secs == 3600


async def test_requested_resources_and_network_rules_reach_the_sandbox(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    spec = WorkspaceSpec(
        block_network=False,
        resources={
            "cpu": [1, 2],
            "memory_mb": [2048, 4096],
            "timeout_seconds": 600,
            "idle_timeout_seconds": 120,
            "region": "us-east",
            "outbound_domain_allowlist": ["github.com"],
        },
    )

    record = await driver.create(new_id("ws"), spec)

    definition = modal_control_plane.sandboxes()[0].definition
    assert (definition.resources.milli_cpu, definition.resources.milli_cpu_max) == (1000, 2000)
    assert (definition.resources.memory_mb, definition.resources.memory_mb_max) == (2048, 4096)
    assert (definition.timeout_secs, definition.idle_timeout_secs) == (600, 120)
    assert list(definition.scheduler_placement.regions) == ["us-east"]
    assert list(definition.network_access.allowed_domains) == ["github.com"]
    assert record.resources["timeout_seconds"] == 600


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ({"timeout_seconds": 24 * 3600 + 1}, "timeout_seconds"),
        ({"cpu": [4, 2]}, "cpu"),
        ({"memory_mb": "lots"}, "memory_mb"),
        ({"image_id": "not-an-image"}, "image_id"),
        ({"volumes": {"/workspace": "cache"}}, "volumes"),
    ],
)
async def test_bad_resources_are_refused_before_any_modal_call(
    driver: ModalDriver, modal_control_plane: ControlPlane, resources: dict, field: str
) -> None:
    before = modal_control_plane.calls()

    with pytest.raises(InvalidArgumentError) as caught:
        await driver.create(new_id("ws"), WorkspaceSpec(resources=resources))

    assert caught.value.field == field
    assert modal_control_plane.calls() == before


@pytest.mark.parametrize(
    "resources",
    [{"secret_names": ["openai", "aws-root"]}, {"volumes": {"/data": "someone-elses"}}],
)
async def test_secrets_and_volumes_off_the_allowlists_are_refused_before_any_modal_call(
    driver: ModalDriver, modal_control_plane: ControlPlane, resources: dict
) -> None:
    before = modal_control_plane.calls()

    with pytest.raises(PermissionDeniedError):
        await driver.create(new_id("ws"), WorkspaceSpec(resources=resources))

    assert modal_control_plane.calls() == before
    assert modal_control_plane.sandboxes() == []


async def test_allowlisted_secrets_and_volumes_reach_the_sandbox(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    modal_control_plane.add_secret("openai", {"OPENAI_API_KEY": "sk-test"})
    modal_control_plane.add_volume("cache")

    await driver.create(
        new_id("ws"),
        WorkspaceSpec(
            env={"PLAIN": "1"},
            resources={"secret_names": ["openai"], "volumes": {"/cache": "cache"}},
        ),
    )

    (sandbox,) = modal_control_plane.sandboxes()
    assert sandbox.env == {"OPENAI_API_KEY": "sk-test", "PLAIN": "1"}
    assert [m.mount_path for m in sandbox.definition.volume_mounts] == ["/cache"]
    # Secret values travel in the create request, never on the agent's command line.
    assert not any("sk-test" in arg for arg in sandbox.definition.entrypoint_args)


async def test_the_variables_listed_for_secrets_are_required_and_redacted_by_name(
    modal_control_plane: ControlPlane,
) -> None:
    modal_control_plane.publish_image(IMAGE, "im-workspacetestimage00")
    modal_control_plane.add_secret("openai", {"OPENAI_API_KEY": "sk-test", "ORG": "o"})
    modal_control_plane.add_secret("github", {"GH_TOKEN": "gh-test"})
    driver = ModalDriver(_settings(secret_keys={"openai": ("OPENAI_API_KEY",)}))
    try:
        await driver.create(
            new_id("ws"),
            WorkspaceSpec(
                resources={"secret_names": ["openai"]},
                secret_env={"FROM_GATEWAY": "held-value"},
            ),
        )
    finally:
        await driver.close()

    (sandbox,) = modal_control_plane.sandboxes()
    args = list(sandbox.definition.entrypoint_args)
    # Names only, after the daemon's own options: never a value.
    assert args[-2:] == ["--redact-env", "FROM_GATEWAY,OPENAI_API_KEY"]
    assert not any(v in arg for arg in args for v in ("sk-test", "gh-test", "held-value"))
    # A variable the allowlist does not list is in the sandbox, just not redacted.
    assert sandbox.env["ORG"] == "o"


async def test_a_secret_lacking_a_listed_variable_is_refused_by_modal(
    modal_control_plane: ControlPlane,
) -> None:
    modal_control_plane.publish_image(IMAGE, "im-workspacetestimage00")
    modal_control_plane.add_secret("openai", {"OPENAI_KEY": "sk-test"})
    driver = ModalDriver(_settings(secret_keys={"openai": ("OPENAI_API_KEY",)}))
    try:
        with pytest.raises(UpstreamError) as refused:
            await driver.create(new_id("ws"), WorkspaceSpec(resources={"secret_names": ["openai"]}))
    finally:
        await driver.close()

    assert "MODAL_WORKSPACE_ALLOWED_SECRETS" in refused.value.message
    assert "OPENAI_API_KEY" in refused.value.message
    assert "sk-test" not in refused.value.message
    assert modal_control_plane.sandboxes() == []


@pytest.mark.parametrize("key", ["workspace-id", "managed-by", "workspace-root", "created-at"])
async def test_caller_tags_cannot_overwrite_managed_tags(
    driver: ModalDriver, modal_control_plane: ControlPlane, key: str
) -> None:
    workspace_id = new_id("ws")
    before = modal_control_plane.calls()
    with pytest.raises(InvalidArgumentError) as caught:
        await driver.create(workspace_id, WorkspaceSpec(tags={key: "mine"}))
    assert caught.value.field == f"tags.{key}"
    assert modal_control_plane.calls() == before

    record = await driver.create(workspace_id, WorkspaceSpec(tags={"team": "a"}))
    with pytest.raises(InvalidArgumentError):
        await driver.set_tags(workspace_id, {**record.tags, key: "mine"})
    assert (await driver.get(workspace_id)).tags[key] == record.tags[key]


async def test_a_tag_shaped_like_a_driver_record_is_refused_by_the_core_rule(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    # The driver's records and the core's reserved prefix are the same namespace.
    assert records.INTERNAL_PREFIX in policy.MANAGED_TAG_PREFIXES
    workspace_id = new_id("ws")
    before = modal_control_plane.calls()
    with pytest.raises(InvalidArgumentError) as caught:
        await driver.create(workspace_id, WorkspaceSpec(tags={"mwc-lineage": "{}"}))
    assert caught.value.field == "tags.mwc-lineage"
    assert "'mwc-lineage' is managed by the gateway" in caught.value.message
    assert modal_control_plane.calls() == before

    await driver.create(workspace_id, WorkspaceSpec())
    with pytest.raises(InvalidArgumentError) as caught:
        await driver.set_tags(workspace_id, {"mwc-resources": "{}"})
    assert caught.value.field == "tags.mwc-resources"


async def test_set_tags_replaces_caller_tags_and_keeps_managed_ones(driver: ModalDriver) -> None:
    workspace_id = new_id("ws")
    await driver.create(workspace_id, WorkspaceSpec(tags={"old": "1"}))

    record = await driver.set_tags(workspace_id, {"repo-name": "octo/demo"})

    assert "old" not in record.tags
    assert record.tags["repo-name"] == "octo/demo"
    assert record.tags["workspace-id"] == workspace_id
    assert (await driver.get(workspace_id)).tags == record.tags


async def test_get_finds_the_workspace_by_name_without_listing(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    workspace_id = new_id("ws")
    await driver.create(workspace_id, WorkspaceSpec())
    before = modal_control_plane.calls()

    record = await driver.get(workspace_id)

    assert record.state == "running"
    used = _since(before, modal_control_plane.calls())
    assert used["SandboxGetFromNameV2"] == 1
    assert used["SandboxListV2"] == 0 and used["SandboxList"] == 0


async def test_an_unknown_workspace_is_not_found(driver: ModalDriver) -> None:
    with pytest.raises(NotFoundError):
        await driver.get(new_id("ws"))
    with pytest.raises(InvalidArgumentError):
        await driver.get("not-a-workspace-id")


async def test_destroy_terminates_and_the_workspace_reads_as_terminated(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    workspace_id = new_id("ws")
    await driver.create(workspace_id, WorkspaceSpec())

    # Kept (its snapshots resumable): it reads as terminated.
    await driver.destroy(workspace_id, keep_snapshots=True)

    assert (await driver.get(workspace_id)).state == "terminated"
    with pytest.raises(NotFoundError):
        await driver.open_channel(workspace_id)
    assert not modal_control_plane.sandboxes()[0].running
    # Not kept: it reads as never made.
    purged = new_id("ws")
    await driver.create(purged, WorkspaceSpec())
    await driver.destroy(purged)
    with pytest.raises(NotFoundError):
        await driver.get(purged)
    with pytest.raises(NotFoundError):
        await driver.destroy(purged)


async def test_list_returns_this_gateways_running_workspaces(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    kept, gone = new_id("ws"), new_id("ws")
    await driver.create(kept, WorkspaceSpec())
    await driver.create(gone, WorkspaceSpec())
    await driver.destroy(gone)

    records = await driver.list()

    assert [r.workspace_id for r in records] == [kept]


async def test_a_gpu_workspace_uses_the_v1_calls_and_is_still_found_by_name(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    workspace_id = new_id("ws")
    await driver.create(workspace_id, WorkspaceSpec(resources={"gpu": "T4"}))

    assert (await driver.get(workspace_id)).state == "running"
    assert modal_control_plane.calls()["SandboxCreate"] == 1
    await driver.destroy(workspace_id)
    # Terminated V1 sandboxes are not found by name at all: gone, which is still a 404.
    with pytest.raises(NotFoundError):
        await driver.get(workspace_id)


async def test_snapshot_is_an_image_a_new_workspace_starts_from(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    source = new_id("ws")
    await driver.create(source, WorkspaceSpec())
    sandbox = modal_control_plane.sandboxes()[0]
    (sandbox.directory / "workspace" / "notes.txt").write_text("kept")

    snapshot = await driver.snapshot(
        source, SnapshotSpec(snapshot_id=new_id("sn"), ttl_seconds=3600)
    )
    assert snapshot.expires_at is not None
    copy = new_id("ws")
    lineage = Lineage(parent_workspace_id=source, snapshot_id=snapshot.snapshot_id, forked_at="x")
    record = await driver.fork(snapshot, copy, WorkspaceSpec(), lineage)

    assert record.lineage == lineage
    restored = next(s for s in modal_control_plane.sandboxes() if s.name == copy)
    assert (restored.directory / "workspace" / "notes.txt").read_text() == "kept"


async def test_the_channel_carries_bytes_both_ways_over_one_exec(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    workspace_id = new_id("ws")
    await driver.create(workspace_id, WorkspaceSpec())
    channel = await driver.open_channel(workspace_id)
    received = Received(channel)
    before = modal_control_plane.calls()

    for i in range(100):
        message = f"round trip {i}\n".encode() + bytes(range(256))
        channel.writer.write(message)
        await channel.writer.drain()
        assert await received.exactly(len(message), 30) == message

    used = _since(before, modal_control_plane.calls())
    assert used["TaskExecStart"] == 0
    assert modal_control_plane.calls()["TaskExecStart"] == 1
    await channel.close()
    assert channel.closed.is_set()


async def test_a_large_write_travels_whole(driver: ModalDriver) -> None:
    workspace_id = new_id("ws")
    await driver.create(workspace_id, WorkspaceSpec())
    channel = await driver.open_channel(workspace_id)
    received = Received(channel)
    payload = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MiB, several stdin chunks

    channel.writer.write(payload)
    await channel.writer.drain()

    assert await received.exactly(len(payload), 60) == payload
    await channel.close()


async def test_an_idle_channel_closes_itself_so_the_sandbox_can_idle_out(
    modal_control_plane: ControlPlane,
) -> None:
    modal_control_plane.publish_image(IMAGE, "im-workspacetestimage00")
    driver = ModalDriver(_settings(channel_idle_seconds=0.5))
    workspace_id = new_id("ws")
    await driver.create(workspace_id, WorkspaceSpec(resources={"idle_timeout_seconds": 2}))
    channel = await driver.open_channel(workspace_id)
    received = Received(channel)
    channel.writer.write(b"ping")
    await channel.writer.drain()
    assert await received.exactly(4, 30) == b"ping"

    await asyncio.wait_for(channel.closed.wait(), 30)
    # The output ended (stdin EOF ended the echo agent) and nothing came after the ping.
    assert received.ends == [None]
    assert received.data == b""

    # With no exec left running, the sandbox's own idle timeout ends it: suspended, its exit
    # snapshot recorded.
    async def suspended() -> None:
        while (await driver.get(workspace_id)).state != "suspended":
            await asyncio.sleep(0.2)

    await asyncio.wait_for(suspended(), 30)
    suspension = (await driver.get(workspace_id)).suspension
    assert suspension is not None and suspension.reason == "idle"
    await driver.close()


async def test_the_default_image_is_built_from_the_projects_wheel(
    modal_control_plane: ControlPlane, tmp_path: Path
) -> None:
    wheel = tmp_path / "modal_workspace_core-0.1.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"not really a wheel, but its bytes are uploaded")
    driver = ModalDriver(_settings(default_image_name=None, wheel=_configured_wheel(wheel)))

    await driver.create(new_id("ws"), WorkspaceSpec())

    calls = modal_control_plane.calls()
    assert calls["ImageGetOrCreate"] >= 2  # one per layer
    assert calls["MountPutFile"] == 1
    (sandbox,) = modal_control_plane.sandboxes()
    images = modal_control_plane.call(lambda: dict(modal_control_plane.state.images))
    assert sandbox.definition.image_id in images
    commands = [c for image in images.values() for c in image.dockerfile_commands]
    assert any("uv pip install --system" in c and wheel.name in c for c in commands)
    assert any("ripgrep" in c and "git-lfs" in c for c in commands)
    await driver.close()


async def test_without_a_wheel_or_a_named_image_create_says_what_to_do(
    modal_control_plane: ControlPlane, tmp_path: Path
) -> None:
    missing = _configured_wheel(tmp_path / "missing.whl")
    driver = ModalDriver(_settings(default_image_name=None, wheel=missing))

    with pytest.raises(UpstreamError, match="MODAL_WORKSPACE_DEFAULT_IMAGE_NAME"):
        await driver.create(new_id("ws"), WorkspaceSpec())

    assert modal_control_plane.sandboxes() == []
    await driver.close()


async def test_the_gateways_state_volume_is_never_mounted_in_a_workspace(
    modal_control_plane: ControlPlane,
) -> None:
    """Even when an allowlist built in code names it: a workspace that could write the OAuth
    server's records could grant itself tokens."""
    modal_control_plane.publish_image(IMAGE, "im-workspacetestimage00")
    driver = ModalDriver(
        _settings(allowed_volumes=("cache", "gateway-state"), state_volume="gateway-state")
    )
    before = modal_control_plane.calls()
    with pytest.raises(PermissionDeniedError) as refused:
        spec = WorkspaceSpec(resources={"volumes": {"/state": "gateway-state"}})
        await driver.create(new_id("ws"), spec)
    assert refused.value.field == "volumes[0]"
    assert modal_control_plane.calls() == before
    await driver.close()
