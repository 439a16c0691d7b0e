"""A template whose repository is hostile: its setup starts the tenant (`hostile_tenant.py`) in
the clone, so the build's snapshot is taken while the tenant swaps its directories for links to
a host directory and writes forged lines into every output it reaches, and the setup's own
output claims another commit. Asserted: the template records the commit the agent cloned (read
from its report channel, which no workspace process can write), workspaces start from the build,
and the host's canary is nowhere under the data root through build, create and delete.

Local driver, isolated (bubblewrap): the tenant writes into every output of its uid it can open,
which only a pid namespace keeps to the workspace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import modal_workspace_core as mwc
import pytest
from modal_workspace_core.config import load_settings
from modal_workspace_core.drivers.local.bubblewrap import probe
from modal_workspace_core.operations.templates import Template, TemplateDeleted
from support.git_server import GitServer

from .hostile_tenant import FORGED, TENANT, Canary, assert_no_leak, launch_command

ISOLATION = probe()
pytestmark = pytest.mark.skipif(not ISOLATION.enabled, reason=f"needs bubblewrap: {ISOLATION}")
SLUG = "octo/hello"


async def test_a_template_built_under_the_tenant_records_the_cloned_commit_and_leaks_nothing(
    tmp_path: Path, git_server: GitServer
) -> None:
    canary = Canary.make(tmp_path)
    head = git_server.commit(SLUG, "main", {".tenant.py": TENANT})
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"github": {"GH_TOKEN": git_server.token}}))
    env = {
        **git_server.gateway_env,
        "MODAL_WORKSPACE_ISOLATION": "bwrap",
        "MODAL_WORKSPACE_JANITOR_SECONDS": "0",
        "MODAL_WORKSPACE_ALLOWED_SECRETS": "github",
        "MODAL_WORKSPACE_LOCAL_SECRETS_FILE": str(secrets),
    }
    data_root = tmp_path / "data"
    forged_head = "0" * 40
    setup = (
        f"{launch_command(canary)}; echo HEAD is now at {forged_head}; "
        f"echo {FORGED}; echo {FORGED} >&2"
    )
    async with mwc.Workspaces(settings=load_settings(env, data_root=data_root)) as wss:
        made = cast(
            Template,
            await wss.call(
                "template_create",
                name="tenant",
                repository=SLUG,
                ref="main",
                setup_command=setup,
                use_github_token=True,
            ),
        )
        assert (made.state, made.build, made.error) == ("ready", 1, None), made
        assert made.head == head
        assert_no_leak(data_root, canary)

        ws = await wss.create(template="tenant")
        read = await ws.exec(
            "cat README.md; test -f t/ready && echo tenant-was-here; "
            "grep -rls HOST-CANARY /workspace ~ /tmp 2>/dev/null | head",
            workdir="hello",
        )
        assert read.stdout == "# hello\ntenant-was-here\n", read.stdout
        assert_no_leak(data_root, canary)

        deleted = cast(TemplateDeleted, await wss.call("template_delete", name="tenant"))
        assert (deleted.deleted, deleted.builds_deleted) == (True, 1)
        await ws.terminate()
        assert_no_leak(data_root, canary)
        assert canary.directory.is_dir()
