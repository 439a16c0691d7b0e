"""The extension builds, imports, and exposes the error family."""

import subprocess
import sys
import tomllib
from pathlib import Path

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


def test_dir_lists_the_public_names_before_they_are_loaded() -> None:
    probe = (
        "import sys, modal_workspace_core as m; names = dir(m); "
        "print(sorted(set(m.__all__) - set(names)), "
        "'modal_workspace_core.surfaces.python_client' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "False"], out.stdout
    for name in ("Workspaces", "Workspace", "WorkspaceError", "EventRing", "NotFoundError"):
        assert name in dir(mwc)
    assert all(hasattr(mwc, name) for name in mwc.__all__)


def test_the_error_family_is_importable_from_the_package_lazily() -> None:
    from modal_workspace_core import errors

    for name in errors.__all__:
        value = getattr(errors, name)
        if isinstance(value, type) and issubclass(value, errors.WorkspaceError):
            assert getattr(mwc, name) is value, name
    from modal_workspace_core import InvalidArgumentError, NotFoundError, WorkspaceError

    assert issubclass(NotFoundError, WorkspaceError) and NotFoundError.status == 404
    assert issubclass(InvalidArgumentError, WorkspaceError)
    # Importing the package alone loads none of them (nor pydantic, which they need).
    probe = "import sys, modal_workspace_core; print('pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_license_is_apache_2_0_in_the_file_and_both_manifests() -> None:
    root = Path(__file__).resolve().parents[1]
    text = (root / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX" in text
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert (project["license"], project["license-files"]) == ("Apache-2.0", ["LICENSE"])
    package = tomllib.loads((root / "Cargo.toml").read_text())["package"]
    assert package["license"] == "Apache-2.0"
