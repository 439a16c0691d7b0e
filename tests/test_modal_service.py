"""What only the Modal driver does, through the service table (the same operations as REST, MCP
and the Python API): secrets that stay in Modal, and a channel that idles out and reopens. The
product's end-to-end tests (`test_e2e_rest.py`, `test_e2e_mcp.py`) run on this driver as well."""

from __future__ import annotations

import asyncio
import sys

import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_service_support import allowed_secrets, idle_seconds, needs_container_paths, workspaces
from modal_workspace_core.errors import PermissionDeniedError, UpstreamError
from modal_workspace_core.surfaces.python_client import Workspaces
from support.git_server import GitServer

# The fixtures, imported for pytest to find.
__all__ = ["allowed_secrets", "idle_seconds", "modal_control_plane", "workspaces"]

# The service sends container paths (`/workspace`) inside the protocol, where the control plane
# cannot translate them: sandboxes must see real container paths.
pytestmark = needs_container_paths


async def test_exec_runs_a_command_in_the_workspace(workspaces: Workspaces) -> None:
    ws = await workspaces.create(env={"GREETING": "hello"})

    result = await ws.exec('echo "$GREETING from $(basename "$PWD")"; echo oops >&2; exit 3')

    assert result.returncode == 3
    assert result.stdout == "hello from workspace\n"
    assert result.stderr == "oops\n"
    assert (await workspaces.get(ws.id)).info.driver == "modal"


@pytest.mark.parametrize("idle_seconds", [1.0])
async def test_after_the_channel_idles_out_the_next_request_reconnects(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    ws = await workspaces.create()
    started = await ws.realtime_exec_start("echo before; sleep 3; echo after")
    client = await workspaces.service.agent(ws.id)
    before = modal_control_plane.calls()["TaskExecStart"]

    for _ in range(300):
        if client.closed:
            break
        await asyncio.sleep(0.05)
    assert client.closed

    # The reader of the exec resumes on a new channel: one new exec, nothing lost.
    events = [e async for e in ws.follow(started.exec_id)]
    assert "".join(e.data or "" for e in events if e.type == "stdout") == "before\nafter\n"
    assert (await ws.exec("echo again")).stdout == "again\n"
    assert modal_control_plane.calls()["TaskExecStart"] - before == 1


async def test_named_secrets_reach_commands_as_modal_secrets_not_as_values(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    before = modal_control_plane.calls()["SecretGetOrCreate"]

    ws = await workspaces.create(secret_names=["openai"])

    # Allowlisted without its variables ("openai", not "openai:OPENAI_API_KEY"): the secret
    # works, and its value is not redacted, as docs/modal.md says.
    assert (await ws.exec("printenv OPENAI_API_KEY")).stdout == "sk-modal-held\n"
    # Looked up by name (openai only: the GitHub secret is the gateway's, never a sandbox's);
    # none made from values, which the gateway does not have (its settings hold no secret values).
    assert modal_control_plane.calls()["SecretGetOrCreate"] - before == 1


async def test_the_github_token_reaches_git_only_through_askpass_and_is_redacted(
    workspaces: Workspaces, git_server: GitServer
) -> None:
    ws = await workspaces.create()
    # The sandbox does not hold the token: the gateway sends it for the one git step.
    assert (await ws.exec("printenv GH_TOKEN; echo $?")).stdout == "1\n"

    clone = await ws.repo_clone("octo/hello", use_github_token=True)
    events = [e async for e in ws.follow(clone.exec_id)]

    status = await ws.realtime_exec_status(clone.exec_id)
    assert (status.state, status.returncode) == ("finished", 0)
    assert git_server.token in git_server.passwords
    assert all(git_server.token not in (e.data or "") for e in events)


async def test_a_secret_off_the_allowlist_is_refused_before_any_modal_call(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    before = modal_control_plane.calls()

    with pytest.raises(PermissionDeniedError) as refused:
        await workspaces.create(secret_names=["aws-root"])

    assert refused.value.field == "secret_names[0]"
    assert modal_control_plane.calls() == before


@pytest.mark.parametrize("allowed_secrets", ["github:GH_TOKEN,openai:OPENAI_API_KEY"])
async def test_a_listed_secret_value_is_redacted_from_every_command_even_split_across_writes(
    workspaces: Workspaces,
) -> None:
    ws = await workspaces.create(secret_names=["openai"])
    # The command has the value; its output never shows it, even when it arrives in two
    # writes (a pause between them makes the agent read them separately).
    split = (
        'test "$OPENAI_API_KEY" = sk-modal-held && echo has-it; v="$OPENAI_API_KEY"; '
        'printf %s "${v:0:6}"; sleep 0.3; printf "%s\\n" "${v:6}"; '
        'printf %s "${v:0:3}" >&2; sleep 0.3; printf "%s!\\n" "${v:3}" >&2'
    )

    result = await ws.exec(split)

    assert result.stdout == "has-it\n[REDACTED]\n"
    assert result.stderr == "[REDACTED]!\n"
    started = await ws.realtime_exec_start(split)
    events = [e async for e in ws.follow(started.exec_id)]
    output = "".join(e.data or "" for e in events)
    assert "sk-modal-held" not in output
    assert output.count("[REDACTED]") == 2


@pytest.mark.parametrize("allowed_secrets", ["github,openai:OPENAI_API_KEY:OPENAI_ORG_ID"])
async def test_a_secret_lacking_a_listed_variable_is_refused_at_create(
    workspaces: Workspaces, modal_control_plane: ControlPlane
) -> None:
    with pytest.raises(UpstreamError) as refused:
        await workspaces.create(secret_names=["openai"])

    assert "OPENAI_ORG_ID" in refused.value.message
    assert "sk-modal-held" not in refused.value.message
    assert modal_control_plane.sandboxes() == []


# What a command inside the sandbox runs to use the agent's socket as the gateway does.
FORGED_CLIENT = """
import asyncio
from modal_workspace_core.channel.client import AgentClient, AgentError

async def main():
    try:
        client = await AgentClient.connect_unix("/run/mwc/agent.sock")
        await client.request("exec.list", {})
        print("served")
    except AgentError as exc:
        print("refused:", exc.code)
    except PermissionError:
        print("unreachable")

asyncio.run(main())
"""


@pytest.mark.parametrize(
    ("run_as_root", "answer"),
    [
        # A root command reaches the socket: the channel key refuses it.
        (True, "refused:"),
        # An unprivileged one (the default) cannot even connect.
        (False, "unreachable"),
    ],
)
async def test_a_command_cannot_use_the_agents_socket_without_the_channel_key(
    workspaces: Workspaces, run_as_root: bool, answer: str
) -> None:
    ws = await workspaces.create(resources={"run_as_root": run_as_root})
    await ws.file_write("forged.py", FORGED_CLIENT)

    # The interpreter that has the package: the image's, as far as this control plane goes.
    result = await ws.exec(f"{sys.executable} forged.py")

    assert result.stdout.startswith(answer), (result.stdout, result.stderr)
    # The gateway, which has the key, is still served.
    assert (await ws.exec("echo still")).stdout == "still\n"


async def test_a_command_scraping_proc_during_an_authenticated_clone_finds_no_token(
    workspaces: Workspaces, git_server: GitServer
) -> None:
    """Whoever commands run as, the token must be in no environment or argv (their memory:
    tests/security/test_modal_token_reach.py)."""
    ws = await workspaces.create()
    # The needle reaches the scraper as a file, so no argv of its own holds the token.
    await ws.file_write(".needle", git_server.token + "\n")
    scraper = await ws.realtime_exec_start(
        "mv .needle /tmp/needle; n=0; "
        "while [ ! -e /tmp/stop ]; do "
        "c=$(cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' "
        "| grep -a -c -F -f /tmp/needle); n=$((n+${c:-0})); done; echo found=$n"
    )
    for i in range(3):
        clone = await ws.repo_clone(
            "octo/hello", destination=f"/workspace/h{i}", use_github_token=True
        )
        [e async for e in ws.follow(clone.exec_id)]
        status = await ws.realtime_exec_status(clone.exec_id)
        assert (status.state, status.returncode) == ("finished", 0)
    await ws.exec("touch /tmp/stop")
    events = [e async for e in ws.follow(scraper.exec_id)]
    assert "".join(e.data or "" for e in events if e.type == "stdout") == "found=0\n"
    assert git_server.token in git_server.passwords
