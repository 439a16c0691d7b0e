"""Proxy headers are believed only from the proxies the operator configures, and a configured
public URL is what the GPT Actions schema names as its server: a client cannot make the schema
(which GPT Actions import and then send the token to) point at a host of its choosing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx2
import pytest
from e2e_support import SCRIPT

from .gateway import gateway

SPOOFED = {"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"}


def _schema_server(base_url: str, headers: dict[str, str]) -> str:
    response = httpx2.get(f"{base_url}/action-openapi.json", headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    (server,) = response.json()["servers"]
    return str(server["url"])


def test_forwarded_headers_count_only_from_a_configured_proxy(tmp_path: Path) -> None:
    # This test's client is on loopback: a gateway that trusts another address ignores it.
    elsewhere = {"MODAL_WORKSPACE_TRUSTED_PROXIES": "10.255.0.1"}
    with gateway(tmp_path / "untrusted", env=elsewhere) as gw:
        spoofed = _schema_server(gw.base_url, SPOOFED)
    with gateway(tmp_path / "default") as gw:
        by_default = _schema_server(gw.base_url, SPOOFED)
        default_url = gw.base_url
    trusting = {"MODAL_WORKSPACE_TRUSTED_PROXIES": "127.0.0.0/8"}
    with gateway(tmp_path / "trusted", env=trusting) as gw:
        forwarded = _schema_server(gw.base_url, SPOOFED)

    assert spoofed.startswith("http://127.0.0.1:")
    assert by_default == default_url
    assert forwarded == "https://evil.example"


def test_the_actions_schema_names_the_configured_public_url(tmp_path: Path) -> None:
    env = {
        "MODAL_WORKSPACE_PUBLIC_URL": "https://gateway.example.com/",
        "MODAL_WORKSPACE_TRUSTED_PROXIES": "127.0.0.1",
    }
    with gateway(tmp_path, env=env) as gw:
        plain = _schema_server(gw.base_url, {})
        forwarded = _schema_server(gw.base_url, SPOOFED)

    assert plain == forwarded == "https://gateway.example.com"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MODAL_WORKSPACE_PUBLIC_URL", "ftp://gateway.example.com"),
        ("MODAL_WORKSPACE_PUBLIC_URL", "https://user:pass@gateway.example.com"),
        ("MODAL_WORKSPACE_PUBLIC_URL", "https://gateway.example.com/?next=evil"),
        ("MODAL_WORKSPACE_TRUSTED_PROXIES", "127.0.0.1,proxy.example"),
        ("MODAL_WORKSPACE_AGENT_TIMEOUT", "0"),
    ],
)
def test_a_bad_gateway_setting_stops_the_start_naming_it(
    tmp_path: Path, name: str, value: str
) -> None:
    argv = [str(SCRIPT), "serve", "--port", "0", "--data-root", str(tmp_path / "data")]
    # A server that ignored the setting would serve until the timeout.
    done = subprocess.run(
        argv, env={"PATH": "/usr/bin:/bin", name: value}, capture_output=True, text=True, timeout=30
    )

    assert done.returncode == 2
    assert name in done.stderr
