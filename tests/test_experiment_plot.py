"""A run drawn as a PNG, through a served gateway on the local driver with the real agent: REST
answers the PNG (or, asked for JSON, what it draws), MCP answers image content a vision model
reads; two runs that reported different metrics draw two different pictures, and a run that
reported none draws a picture that says so."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp_types import ImageContent, TextContent
from modal_workspace_core.config import load_settings
from modal_workspace_core.operations import open_service
from modal_workspace_core.operations.experiment_plot import HEIGHT, WIDTH
from modal_workspace_core.surfaces.rest.app import create_app
from PIL import Image, ImageChops
from service_support import TOKEN, serving
from test_mcp_tools import mcp_client

PNG = b"\x89PNG\r\n\x1a\n"
SYSTEM = {"cpu_percent", "memory_used_gib", "gpu_utilization_percent"}
FALLING = 'for i in 1 2 3 4 5 6 7 8; do echo "::metric loss=$((64 / i))"; done'
RISING = 'for i in 1 2 3; do echo "::metric acc=$((i * 30)) step=$i"; done'


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[str, httpx2.AsyncClient]]:
    settings = load_settings({"MODAL_WORKSPACE_JANITOR_SECONDS": "0"}, data_root=tmp_path / "d")
    service = open_service(settings)
    async with serving(create_app(service, [TOKEN])) as url:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
            ws = (await client.post("/api/workspaces", json={})).json()["workspace_id"]
            try:
                yield url, client
            finally:
                await client.delete(f"/api/workspaces/{ws}")


async def finished_run(client: httpx2.AsyncClient, command: str) -> tuple[str, str]:
    ws = (await client.get("/api/workspaces")).json()["workspaces"][0]["workspace_id"]
    started = await client.post(f"/api/workspaces/{ws}/experiments", json={"command": command})
    assert started.status_code == 200, started.text
    run = started.json()["run_id"]
    async with asyncio.timeout(60):
        while (await client.get(f"/api/workspaces/{ws}/experiments/{run}")).json()[
            "state"
        ] == "running":
            await asyncio.sleep(0.2)
    return ws, run


def picture(data: bytes) -> Image.Image:
    assert data.startswith(PNG)
    image = Image.open(io.BytesIO(data))
    assert image.size == (WIDTH, HEIGHT)
    return image.convert("RGB")


async def test_rest_answers_the_png_and_two_runs_draw_two_pictures(
    api: tuple[str, Any],
) -> None:
    _, client = api
    ws, falling = await finished_run(client, FALLING)
    _, rising = await finished_run(client, RISING)
    drawn = {}
    for run in (falling, rising):
        got = await client.get(f"/api/workspaces/{ws}/experiments/{run}/plot")
        assert got.status_code == 200, got.text
        assert got.headers["content-type"] == "image/png"
        drawn[run] = got.content
        described = await client.get(
            f"/api/workspaces/{ws}/experiments/{run}/plot",
            headers={"Accept": "application/json"},
        )
        assert described.json()["size_bytes"] == len(got.content)
        assert described.json()["media_type"] == "image/png"
    assert (
        await client.get(
            f"/api/workspaces/{ws}/experiments/{falling}/plot",
            headers={"Accept": "application/json"},
        )
    ).json()["panels"] == ["loss"]
    one, two = picture(drawn[falling]), picture(drawn[rising])
    assert ImageChops.difference(one, two).getbbox() is not None
    # Not a blank canvas: the curve and its axes take many colours.
    assert len(one.getcolors(maxcolors=1 << 20) or []) > 20

    _, quiet = await finished_run(client, "true")
    described = await client.get(
        f"/api/workspaces/{ws}/experiments/{quiet}/plot", headers={"Accept": "application/json"}
    )
    assert set(described.json()["panels"]) <= SYSTEM
    picture((await client.get(f"/api/workspaces/{ws}/experiments/{quiet}/plot")).content)


async def test_mcp_answers_image_content(api: tuple[str, Any]) -> None:
    url, client = api
    ws, run = await finished_run(client, FALLING)
    rest = (await client.get(f"/api/workspaces/{ws}/experiments/{run}/plot")).content
    async with mcp_client(url, "legacy") as mcp:
        result = await mcp.call_tool("experiment_plot", {"workspace_id": ws, "run_id": run})
    assert not result.is_error
    image, text = result.content
    assert isinstance(image, ImageContent) and isinstance(text, TextContent)
    assert image.mime_type == "image/png"
    drawn = base64.b64decode(image.data)
    picture(drawn)
    assert len(drawn) == len(rest)
    assert result.structured_content is not None
    assert result.structured_content["panels"][-1:] == ["loss"]
    assert "image" not in result.structured_content
