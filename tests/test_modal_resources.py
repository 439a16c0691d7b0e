"""CPU and memory limits, region and outbound allowlists on the Modal driver, with the real SDK
against the test control plane: what the core accepts reaches `Sandbox.create` exactly as the
core wrote it (the control plane keeps the sandbox definition it was sent), what it refuses never
reaches Modal at all."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_proto import api_pb2
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.base import SnapshotSpec, WorkspaceSpec
from modal_workspace_core.drivers.modal.driver import ModalDriver, ModalSettings
from modal_workspace_core.errors import InvalidArgumentError
from modal_workspace_core.policy import new_id
from modal_workspace_core.surfaces.python_client import Workspaces

__all__ = ["modal_control_plane"]  # the fixture, imported for pytest to find

ECHO_AGENT = Path(__file__).parent / "modal_control_plane" / "echo_agent.py"
IMAGE = "resources-test-image"
ALLOWLIST = api_pb2.NetworkAccess.NetworkAccessType.ALLOWLIST


@pytest.fixture
async def driver(modal_control_plane: ControlPlane) -> AsyncIterator[ModalDriver]:
    modal_control_plane.publish_image(IMAGE, "im-resourcestestimage00")
    driver = ModalDriver(
        ModalSettings(
            app_name="resources-tests",
            agent_command=(sys.executable, str(ECHO_AGENT)),
            default_image_name=IMAGE,
        )
    )
    yield driver
    await driver.close()


@pytest.fixture
async def workspaces(driver: ModalDriver, tmp_path: Path) -> AsyncIterator[Workspaces]:
    settings = load_settings(
        {"MODAL_WORKSPACE_DRIVER": "modal", "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path / "data")}
    )
    async with Workspaces(driver, settings=settings) as wss:
        yield wss


def _definition(plane: ControlPlane) -> api_pb2.Sandbox:
    (sandbox,) = plane.sandboxes()
    return sandbox.definition


async def test_limits_region_and_allowlists_reach_the_create_request_canonical(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    ws = await workspaces.create(
        resources={
            "cpu": 1.5,
            "cpu_limit": 3,
            "memory_mb": 1024,
            "memory_limit_mb": 2048,
            "region": ["US-East", "eu-west", "us-east"],
            "outbound_cidr_allowlist": ["140.82.112.0/20", "2606:4700:0000::/32", "1.1.1.1"],
            "outbound_domain_allowlist": ["GitHub.com.", "*.pypi.org", "github.com"],
        }
    )

    definition = _definition(modal_control_plane)
    assert modal_control_plane.calls()["SandboxCreateV2"] == 1
    resources = definition.resources
    assert (resources.milli_cpu, resources.milli_cpu_max) == (1500, 3000)
    assert (resources.memory_mb, resources.memory_mb_max) == (1024, 2048)
    assert list(definition.scheduler_placement.regions) == ["us-east", "eu-west"]
    network = definition.network_access
    assert network.network_access_type == ALLOWLIST
    assert list(network.allowed_cidrs) == ["140.82.112.0/20", "2606:4700::/32", "1.1.1.1/32"]
    assert list(network.allowed_domains) == ["github.com", "*.pypi.org"]
    # The record says what the sandbox got, so a resume asks for the same.
    recorded = ws.info.resources
    assert (recorded["cpu"], recorded["memory_mb"]) == ([1.5, 3.0], [1024, 2048])
    assert recorded["region"] == ["us-east", "eu-west"]
    assert recorded["outbound_cidr_allowlist"] == list(network.allowed_cidrs)
    assert recorded["outbound_domain_allowlist"] == list(network.allowed_domains)


async def test_a_limit_alone_lowers_the_default_request_to_it(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    await workspaces.create(resources={"cpu_limit": 1, "memory_limit_mb": 2048})

    resources = _definition(modal_control_plane).resources
    assert (resources.milli_cpu, resources.milli_cpu_max) == (1000, 1000)
    assert (resources.memory_mb, resources.memory_mb_max) == (2048, 2048)


async def test_an_empty_cidr_allowlist_allows_no_outbound_traffic(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    await workspaces.create(resources={"outbound_cidr_allowlist": []})

    network = _definition(modal_control_plane).network_access
    assert network.network_access_type == ALLOWLIST
    assert list(network.allowed_cidrs) == list(network.allowed_domains) == []


def _many_cidrs(n: int) -> list[str]:
    return [f"8.8.{i}.0/24" for i in range(n)]


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ({"cpu": 4, "cpu_limit": 2}, "resources.cpu_limit"),
        ({"memory_mb": 4096, "memory_limit_mb": 2048}, "resources.memory_limit_mb"),
        ({"cpu": 1.0005}, "resources.cpu"),
        ({"cpu_limit": 0.1}, "resources.cpu_limit"),
        ({"memory_limit_mb": 300_000}, "resources.memory_limit_mb"),
        ({"region": ["us-east", "us east"]}, "resources.region.1"),
        ({"region": []}, "resources.region"),
        ({"region": [f"us-east-{i}" for i in range(9)]}, "resources.region"),
        (
            {"outbound_cidr_allowlist": ["169.254.169.254/32"]},
            "resources.outbound_cidr_allowlist.0",
        ),
        (
            {"outbound_cidr_allowlist": ["8.8.8.8", "10.0.0.0/8"]},
            "resources.outbound_cidr_allowlist.1",
        ),
        ({"outbound_cidr_allowlist": ["0.0.0.0/0"]}, "resources.outbound_cidr_allowlist.0"),
        ({"outbound_cidr_allowlist": ["fd00:ec2::254"]}, "resources.outbound_cidr_allowlist.0"),
        ({"outbound_cidr_allowlist": ["8.8.8.1/24"]}, "resources.outbound_cidr_allowlist.0"),
        ({"outbound_cidr_allowlist": _many_cidrs(17)}, "resources.outbound_cidr_allowlist"),
        (
            {"outbound_domain_allowlist": ["metadata.google.internal"]},
            "resources.outbound_domain_allowlist.0",
        ),
        ({"outbound_domain_allowlist": ["*"]}, "resources.outbound_domain_allowlist.0"),
        ({"outbound_domain_allowlist": ["8.8.8.8"]}, "resources.outbound_domain_allowlist.0"),
    ],
)
async def test_bad_values_are_refused_naming_the_field_before_any_modal_call(
    workspaces: Workspaces,
    modal_control_plane: ControlPlane,
    resources: dict[str, Any],
    field: str,
) -> None:
    before = modal_control_plane.calls()

    with pytest.raises(InvalidArgumentError) as refused:
        await workspaces.create(resources=resources)

    assert refused.value.field == field
    assert modal_control_plane.calls() == before
    assert modal_control_plane.sandboxes() == []


async def test_an_allowlist_on_a_blocked_network_is_refused_before_any_modal_call(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    before = modal_control_plane.calls()

    with pytest.raises(InvalidArgumentError) as refused:
        await workspaces.create(
            block_network=True, resources={"outbound_domain_allowlist": ["github.com"]}
        )

    assert refused.value.field == "block_network"
    assert "resources.outbound_domain_allowlist" in refused.value.message
    assert modal_control_plane.calls() == before


@pytest.mark.parametrize(
    ("resources", "block_network", "field"),
    [
        ({"cpu": [1, 2], "cpu_limit": 4}, False, "cpu"),
        ({"memory_mb": 2048, "memory_limit_mb": 1024}, False, "memory_limit_mb"),
        ({"memory_limit_mb": 1024.5}, False, "memory_limit_mb"),
        ({"region": "us east"}, False, "region[0]"),
        (
            {"outbound_cidr_allowlist": ["8.8.8.8", "127.0.0.1"]},
            False,
            "outbound_cidr_allowlist[1]",
        ),
        ({"outbound_cidr_allowlist": "8.8.8.8/32"}, False, "outbound_cidr_allowlist"),
        ({"outbound_domain_allowlist": ["printer.local"]}, False, "outbound_domain_allowlist[0]"),
        ({"outbound_cidr_allowlist": ["8.8.8.8"]}, True, "outbound_cidr_allowlist"),
    ],
)
async def test_the_driver_applies_the_same_rules_to_callers_of_its_own(
    driver: ModalDriver,
    modal_control_plane: ControlPlane,
    resources: dict[str, Any],
    block_network: bool,
    field: str,
) -> None:
    before = modal_control_plane.calls()
    spec = WorkspaceSpec(resources=resources, block_network=block_network)

    with pytest.raises(InvalidArgumentError) as refused:
        await driver.create(new_id("ws"), spec)

    assert refused.value.field == field
    assert modal_control_plane.calls() == before


async def test_a_resume_asks_for_the_same_limits_region_and_allowlists(
    driver: ModalDriver, modal_control_plane: ControlPlane
) -> None:
    ws = new_id("ws")
    resources = {
        "cpu": 1,
        "cpu_limit": 2,
        "memory_limit_mb": 3072,
        "region": "eu-west",
        "outbound_cidr_allowlist": ["140.82.112.0/20"],
        "outbound_domain_allowlist": ["*.github.com"],
    }
    await driver.create(ws, WorkspaceSpec(resources=resources))
    snapshot = await driver.snapshot(ws, SnapshotSpec(snapshot_id=new_id("sn")))

    await driver.resume(ws, snapshot)

    first, second = sorted(modal_control_plane.sandboxes(), key=lambda s: s.created_at)
    assert second.running and not first.running
    for field in ("resources", "scheduler_placement", "network_access"):
        assert getattr(second.definition, field) == getattr(first.definition, field), field
    assert list(second.definition.network_access.allowed_domains) == ["*.github.com"]
    assert second.definition.resources.memory_mb_max == 3072


def _driver_with_settings(plane: ControlPlane, tmp_path: Path, **env: str) -> ModalDriver:
    """A driver configured from the environment `env` as the gateway reads it (its agent and
    image those of this file's other drivers)."""
    plane.publish_image(IMAGE, "im-resourcestestimage00")
    settings = load_settings(
        {"MODAL_WORKSPACE_DRIVER": "modal", "MODAL_WORKSPACE_DATA_ROOT": str(tmp_path), **env}
    )
    assert settings.modal is not None
    return ModalDriver(
        replace(
            settings.modal,
            app_name="resources-tests",
            agent_command=(sys.executable, str(ECHO_AGENT)),
            default_image_name=IMAGE,
        )
    )


def _idle_timeouts(plane: ControlPlane) -> list[int]:
    """Each sandbox's idle timeout as Modal was asked for it, oldest first (0: none)."""
    made = sorted(plane.sandboxes(), key=lambda s: s.created_at)
    return [s.definition.idle_timeout_secs for s in made]


async def test_a_workspace_that_names_no_idle_timeout_gets_the_default_one(
    modal_control_plane: ControlPlane, tmp_path: Path
) -> None:
    driver = _driver_with_settings(modal_control_plane, tmp_path)
    try:
        named = await driver.create(new_id("ws"), WorkspaceSpec(resources={}))
        kept = await driver.create(
            new_id("ws"), WorkspaceSpec(resources={"idle_timeout_seconds": 120})
        )
    finally:
        await driver.close()

    assert _idle_timeouts(modal_control_plane) == [900, 120]
    # The record keeps it, so a resume and a fork ask for the same.
    assert named.resources["idle_timeout_seconds"] == 900
    assert kept.resources["idle_timeout_seconds"] == 120


async def test_the_default_idle_timeout_is_a_setting_and_zero_turns_it_off(
    modal_control_plane: ControlPlane, tmp_path: Path
) -> None:
    setting = "MODAL_WORKSPACE_DEFAULT_IDLE_TIMEOUT_SECONDS"
    for value in ("300", "0"):
        driver = _driver_with_settings(modal_control_plane, tmp_path, **{setting: value})
        try:
            made = await driver.create(new_id("ws"), WorkspaceSpec(resources={}))
            await driver.create(new_id("ws"), WorkspaceSpec(resources={"idle_timeout_seconds": 60}))
        finally:
            await driver.close()
        assert ("idle_timeout_seconds" in made.resources) is (value != "0")

    assert _idle_timeouts(modal_control_plane) == [300, 60, 0, 60]


async def test_a_resume_keeps_the_idle_timeout_its_record_holds(
    modal_control_plane: ControlPlane, tmp_path: Path
) -> None:
    setting = "MODAL_WORKSPACE_DEFAULT_IDLE_TIMEOUT_SECONDS"
    # Made while the default was off, resumed once it is on: still none.
    off = _driver_with_settings(modal_control_plane, tmp_path, **{setting: "0"})
    try:
        ws = new_id("ws")
        await off.create(ws, WorkspaceSpec(resources={}))
        snapshot = await off.snapshot(ws, SnapshotSpec(snapshot_id=new_id("sn")))
    finally:
        await off.close()
    on = _driver_with_settings(modal_control_plane, tmp_path, **{setting: "600"})
    try:
        await on.resume(ws, snapshot)
    finally:
        await on.close()

    assert _idle_timeouts(modal_control_plane) == [0, 0]
