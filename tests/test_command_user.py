"""Who runs a workspace's commands, as each driver records and launches it, and the one rule that
keeps a token out of a workspace whose commands are root (the end-to-end proof on the Modal
driver: tests/security/test_modal_token_reach.py)."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from modal_workspace_core.config import ModalSettings
from modal_workspace_core.drivers.base import WorkspaceRecord
from modal_workspace_core.drivers.command_user import (
    AGENT_GIT_UID,
    COMMAND_HOME,
    COMMAND_UID,
    commands_run_as_root,
)
from modal_workspace_core.drivers.local.driver import _check_resources
from modal_workspace_core.drivers.modal import records
from modal_workspace_core.drivers.modal.channel_key import launch_config
from modal_workspace_core.drivers.modal.sandbox_options import sandbox_options
from modal_workspace_core.errors import InvalidArgumentError, PermissionDeniedError
from modal_workspace_core.git import credentials
from modal_workspace_core.policy import github_repo

KEY = "ab" * 32


def test_an_unprivileged_workspace_launches_with_both_users_and_a_home() -> None:
    config = json.loads(
        launch_config(KEY, run_as_root=False, first_start=True, volume_roots=["/data"])
    )
    assert config == {
        "channel_key": KEY,
        "user": {"uid": COMMAND_UID, "gid": COMMAND_UID},
        "agent_user": {"uid": AGENT_GIT_UID, "gid": AGENT_GIT_UID},
        "home": {"path": COMMAND_HOME, "user_name": "workspace"},
        "claim_root": True,
        "volume_roots": ["/data"],
    }
    # A resume or a fork claims nothing: commands have run, the tree is theirs to shape.
    assert (
        json.loads(launch_config(KEY, run_as_root=False, first_start=False))["claim_root"] is False
    )


def test_a_root_workspace_launches_with_the_key_alone() -> None:
    config = json.loads(launch_config(KEY, run_as_root=True, first_start=True))
    assert config == {"channel_key": KEY}


def test_the_modal_record_says_who_runs_commands_and_an_older_record_means_root() -> None:
    settings = ModalSettings()
    for asked, recorded in [({}, False), ({"run_as_root": True}, True)]:
        options = sandbox_options(asked, settings)
        tags = {records.TAG_RESOURCES: records.resources_value(options.recorded())}
        assert records.resources(tags)["run_as_root"] is recorded
        # A resume reads the record back into the same choice.
        assert sandbox_options(records.resources(tags), settings).run_as_root is recorded
    # Recorded before commands had a user of their own: they ran as root, and still do.
    older = {records.TAG_RESOURCES: json.dumps({"cpu": [2, 4]})}
    assert commands_run_as_root(records.resources(older))
    assert commands_run_as_root(records.resources({}))


def test_the_local_driver_takes_no_root_commands() -> None:
    _check_resources({"run_as_root": False})
    with pytest.raises(InvalidArgumentError, match="never run as root") as refused:
        _check_resources({"run_as_root": True})
    assert refused.value.field == "resources.run_as_root"


async def test_no_token_is_minted_for_a_workspace_whose_commands_are_root() -> None:
    record = WorkspaceRecord(
        workspace_id="ws-" + "0" * 32,
        driver="modal",
        root="/workspace",
        created_at="2026-12-02T00:00:00.000Z",
        tags={},
        state="running",
        resources={"run_as_root": True},
    )
    # No service at all: the refusal comes before anything would ask it for a token.
    svc = cast(Any, None)
    for field in ("use_github_token", "repo_push"):
        with pytest.raises(PermissionDeniedError, match="runs its commands as root") as refused:
            await credentials.for_workspace_git(
                svc, record, github_repo("octo/hello"), credentials.PUSH, field
            )
        assert refused.value.field == field
