"""What the template tests share, whichever driver runs them: the template every test builds
(`octo/hello` from the test git server, standing in for GitHub), the sweep that checks it, and
waits for the builds a sweep starts."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import modal_workspace_core as mwc
from modal_workspace_core.errors import NotFoundError
from modal_workspace_core.janitor import Janitor
from modal_workspace_core.operations.template_records import Build, TemplateStore
from modal_workspace_core.operations.templates import Template, TemplateList

__all__ = [
    "CHECK_SECONDS",
    "SETUP",
    "SLUG",
    "builds",
    "files",
    "gone",
    "sweep",
    "template",
    "until_built",
]

SLUG = "octo/hello"
# The setup a build runs in the clone: it needs the repository's README (a commit that removes it
# breaks the build) and leaves a mark of its own, which every workspace of the build has.
SETUP = 'test -f README.md && echo "built from $(git rev-parse HEAD)" > .setup-done'
# How often the sweep asks a template's remote (the settings' MODAL_WORKSPACE_TEMPLATE_CHECK_…).
CHECK_SECONDS = 3600


async def template(wss: mwc.Workspaces, name: str) -> Template:
    listed = cast(TemplateList, await wss.call("template_list"))
    (found,) = [t for t in listed.templates if t.name == name]
    return found


async def builds(wss: mwc.Workspaces, name: str) -> list[Build]:
    """The template's builds as the shared store records them."""
    return await TemplateStore(wss.service.shared_store).builds(name)


async def sweep(wss: mwc.Workspaces, later: float = 0) -> None:
    """One lifecycle sweep of this gateway, as if `later` seconds from now."""
    await Janitor(wss.service).sweep(datetime.now(UTC) + timedelta(seconds=later))


async def until_built(wss: mwc.Workspaces, name: str, timeout: float = 180) -> Template:
    """The template once no build of it is under way."""
    async with asyncio.timeout(timeout):
        while (found := await template(wss, name)).building is not None:
            await asyncio.sleep(0.2)
    return found


async def gone(wss: mwc.Workspaces, workspace_id: str, timeout: float = 60) -> bool:
    """Whether the workspace (a build's) is gone, snapshots and all, within `timeout`: a build
    started by the sweep ends or prunes workspaces after its record says how it ended."""
    async with asyncio.timeout(timeout):
        while True:
            try:
                await wss.service.driver.list_snapshots(workspace_id)
            except NotFoundError:
                return True
            await asyncio.sleep(0.2)


async def files(ws: Any, path: str) -> str:
    return cast(str, (await ws.exec(f"cat {path}")).stdout)
