"""Every setting the gateway reads reaches the gateway deployed on Modal, or says why not. One
declaration (`config/deployment.py`), held here to what `load_settings` reads, to README's
Settings table, and to what `modal_app.py` really makes of it: the gateway image's environment
(built against the test control plane) and the Modal Secrets attached to its web function. A
secret's value is never in the image."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import modal
import pytest
from modal_control_plane import ControlPlane, modal_control_plane
from modal_workspace_core.config import load_settings
from modal_workspace_core.config.deployment import (
    AT_DEPLOY,
    FORWARDED,
    IN_SECRET,
    ROUTES,
    SECRETS,
    SET_BY_DEPLOY,
    SETTINGS,
    forwarded_settings,
)
from test_modal_app import MODAL_APP, load_modal_app, wheel
from test_settings_read_once import WHOLE, CountingEnviron

__all__ = ["modal_control_plane", "wheel"]  # the fixtures, imported for pytest to find

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_settings() -> list[str]:
    """The variables README's Settings table documents (a row's first cell names one or two)."""
    section = README.read_text().split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    names: list[str] = []
    for row in section.splitlines():
        if row.startswith("| `"):
            names += re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])
    return names


def read_by_the_gateway() -> set[str]:
    """Every variable `load_settings` reads (an empty environment takes every branch that reads
    one: `tests/test_settings_read_once.py`)."""
    env = CountingEnviron({"MODAL_WORKSPACE_DRIVER": "modal"})
    load_settings(env)
    return set(env.lookups) - {WHOLE}


def routed(*how: str) -> set[str]:
    return {name for name, route in SETTINGS.items() if route.how in how}


def test_every_variable_the_gateway_reads_is_declared_for_a_deployment() -> None:
    undeclared = read_by_the_gateway() - set(SETTINGS)
    assert undeclared == set(), "say how it reaches a gateway on Modal: config/deployment.py"


def test_every_declared_setting_is_read_by_the_gateway_or_by_modal_deploy() -> None:
    read, deploying = read_by_the_gateway(), MODAL_APP.read_text()
    assert routed(*set(ROUTES) - {AT_DEPLOY}) <= read
    assert all(f'"{name}"' in deploying for name in routed(AT_DEPLOY))
    # Each says why it is not forwarded, and a secret names the Modal Secret that holds it.
    assert all(route.how in ROUTES for route in SETTINGS.values())
    assert [name for name in set(SETTINGS) - routed(FORWARDED) if not SETTINGS[name].why] == []
    assert {SETTINGS[name].secret for name in routed(IN_SECRET)} <= set(SECRETS.values())


def test_the_readmes_settings_table_documents_each_setting_once() -> None:
    listed = readme_settings()
    assert sorted(listed) == sorted(set(listed))
    assert set(listed) == {name for name in SETTINGS if name.startswith("MODAL_WORKSPACE_")}


def deploying_with_every_setting(monkeypatch: pytest.MonkeyPatch, wheel: Path) -> dict[str, str]:
    """Every declared variable set where `modal deploy` runs, each to a value of its own; those
    `modal_app.py` acts on to one it can use. Returns the values."""
    values = {name: f"value-of-{name.lower()}" for name in SETTINGS}
    values |= {
        "MODAL_WORKSPACE_DRIVER": "local",
        "MODAL_WORKSPACE_WHEEL": str(wheel),
        "MODAL_WORKSPACE_ALLOWED_SECRETS": "github-token:GH_TOKEN",
        "MODAL_WORKSPACE_GITHUB_SECRET": "github-token",
        "MODAL_WORKSPACE_SECRET": "gateway-token-secret",
        "MODAL_WORKSPACE_GITHUB_APP_SECRET": "github-app-secret",
        "MODAL_WORKSPACE_APP_NAME": "deployed-settings-gateway",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def test_the_gateway_image_holds_the_forwarded_settings_and_no_other(
    monkeypatch: pytest.MonkeyPatch, wheel: Path, modal_control_plane: ControlPlane
) -> None:
    values = deploying_with_every_setting(monkeypatch, wheel)
    module = load_modal_app(monkeypatch)
    assert forwarded_settings() == module.FORWARDED_SETTINGS
    app = modal.App.lookup("deployed-settings-test", create_if_missing=True)

    module.gateway_image().build(app)

    plane = modal_control_plane
    layers = plane.call(lambda: list(plane.state.images.values()))
    commands = [command for layer in layers for command in layer.dockerfile_commands]
    env = {}
    for command in commands:
        if match := re.fullmatch(r"ENV (\w+)=(.*)", command):
            env[match[1]] = shlex.split(match[2])[0]
    assert set(env) == routed(FORWARDED, SET_BY_DEPLOY)
    assert {name: env[name] for name in routed(FORWARDED)} == {
        name: values[name] for name in routed(FORWARDED)
    }
    assert env["MODAL_WORKSPACE_DRIVER"] == "modal"
    assert env["MODAL_WORKSPACE_WHEEL"] == f"/opt/modal-workspace/wheels/{wheel.name}"
    # What is not forwarded is nowhere in the image: its commands, the files uploaded for it.
    files = plane.call(lambda: list(plane.state.files.values()))
    for name in set(SETTINGS) - routed(FORWARDED, SET_BY_DEPLOY):
        assert not any(values[name] in command for command in commands), name
        assert not any(values[name].encode() in data for data in files), name


def test_each_secret_reaches_the_gateway_in_the_modal_secret_declared_for_it(
    monkeypatch: pytest.MonkeyPatch, wheel: Path
) -> None:
    values = deploying_with_every_setting(monkeypatch, wheel)

    module = load_modal_app(monkeypatch)

    attached = [repr(secret) for secret in module.gateway._spec_.secrets]
    declared = {values[str(SETTINGS[name].secret)] for name in routed(IN_SECRET)}
    assert sorted(attached) == sorted(f"modal.Secret.from_name({name!r})" for name in declared)
