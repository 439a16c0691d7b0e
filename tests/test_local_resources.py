"""The resource fields the local driver can apply, and the ones it refuses: a memory limit
becomes every command's address-space bound; CPU limits, regions and outbound allowlists, which
this machine cannot enforce, are refused naming the field, and nothing is made."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import modal_workspace_core as mwc
import pytest
from modal_workspace_core.drivers.local.driver import LocalDriver


@pytest.fixture
async def driver(tmp_path: Path) -> AsyncIterator[LocalDriver]:
    driver = LocalDriver(tmp_path / "data", isolation="auto")
    yield driver
    for record in await driver.list():
        await driver.destroy(record.workspace_id)


@pytest.fixture
async def wss(driver: LocalDriver) -> AsyncIterator[mwc.Workspaces]:
    async with mwc.Workspaces(driver=driver) as workspaces:
        yield workspaces


ALLOCATE = "python3 -c 'import sys; b = bytearray({} << 20); print(\"allocated\")'"


async def test_memory_beyond_memory_limit_mb_cannot_be_allocated(wss: mwc.Workspaces) -> None:
    ws = await wss.create(resources={"memory_mb": 128, "memory_limit_mb": 512})

    within = await ws.exec(ALLOCATE.format(256))
    beyond = await ws.exec(ALLOCATE.format(1024))

    # Above the request, within the limit: the limit is the bound, not the request.
    assert within.stdout == "allocated\n"
    assert "allocated" not in beyond.stdout
    assert "MemoryError" in beyond.stderr
    assert ws.info.resources["memory_limit_mb"] == 512


@pytest.mark.parametrize(
    ("resources", "why"),
    [
        ({"cpu_limit": 2.0}, "CPU controller"),
        ({"region": ["us-east"]}, "runs on this machine"),
        ({"outbound_cidr_allowlist": ["140.82.112.0/20"]}, "block_network"),
        ({"outbound_domain_allowlist": ["github.com"]}, "block_network"),
    ],
)
async def test_limits_and_network_rules_it_cannot_enforce_are_refused_naming_the_field(
    wss: mwc.Workspaces, driver: LocalDriver, resources: dict[str, object], why: str
) -> None:
    (key,) = resources

    with pytest.raises(mwc.WorkspaceError) as refused:
        await wss.create(resources=resources)

    assert refused.value.field == f"resources.{key}"
    assert "cannot be enforced by the local driver" in refused.value.message
    assert why in refused.value.message
    assert await driver.list() == []
