"""The extension builds, imports, and exposes the error family."""

import subprocess
import sys

import modal_workspace_core as mwc


def test_version_matches_the_crate() -> None:
    assert mwc.__version__ == "0.1.0"


def test_policy_error_is_a_value_error() -> None:
    assert issubclass(mwc.PolicyError, ValueError)


def test_the_agent_entry_point_loads_only_the_compiled_core() -> None:
    # The agent runs in every workspace (the daemon, and one `connect` per channel): it must not
    # pay for the service's web and SDK stacks.
    probe = (
        "import sys, modal_workspace_core.agent; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'pydantic', 'fastapi', 'starlette', 'mcp', 'modal', 'uvicorn', 'httpx'}))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_package_still_offers_its_python_api_by_name() -> None:
    from modal_workspace_core import Workspace, WorkspaceError, Workspaces

    assert mwc.Workspaces is Workspaces and mwc.Workspace is Workspace
    assert issubclass(WorkspaceError, Exception)
    try:
        _ = mwc.NoSuchThing  # type: ignore[attr-defined]
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
