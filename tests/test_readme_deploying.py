"""README's "Deploying on Modal", as far as it can be checked without a Modal account (its blocks
are not run: tests/test_readme_walkthrough.py says why): it installs `modal` as pyproject.toml
pins it, logs in in a way that needs no browser on the deploying machine, and checks the deploy
and reads its logs at the names Modal gives the gateway's app and web function."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import modal
import pytest
from test_modal_app import load_modal_app, wheel

__all__ = ["wheel"]  # the fixture, imported for pytest to find

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def deploying() -> str:
    return README.read_text().split("\n## Deploying on Modal\n", 1)[1].split("\n## ", 1)[0]


def shell_lines() -> list[str]:
    """The commands of the section's shell blocks, comments dropped."""
    blocks = re.findall(r"```sh\n(.*?)```", deploying(), re.S)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]


def test_it_installs_modal_as_the_project_pins_it() -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [d for d in dependencies if re.fullmatch(r"modal\s*[<>=!~].*", d)]

    assert f"pip install '{pin}'" in shell_lines()


def test_it_logs_in_with_a_command_that_needs_no_browser_here() -> None:
    assert "modal token new" in shell_lines()
    assert "`modal setup`" in deploying()


def test_it_checks_the_deploy_and_reads_its_logs_where_modal_serves_them(
    wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = load_modal_app(monkeypatch)
    (function,) = [
        name
        for name, value in vars(module).items()
        if isinstance(value, modal.Function) and value._is_web_endpoint()
    ]
    # Modal's URL for a deployed web function: https://<workspace>--<app>-<function>.modal.run.
    url = f"https://<workspace>--{module.app.name}-{function}.modal.run"

    lines = shell_lines()
    assert f"curl -s {url}/healthz; echo" in lines
    assert f"modal app logs {module.app.name}" in lines
