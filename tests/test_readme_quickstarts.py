"""The README's quickstart configurations are what each client reads: the JSON files parse into
the client's own shape, and the Claude Code command line into `claude mcp add`'s arguments;
every one points at the MCP endpoint with a bearer token taken from where that client keeps
secrets (never the token itself)."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import pytest
from support.readme import readme_block


def assert_endpoint(server: dict[str, Any], secret: str) -> None:
    assert re.fullmatch(r"https?://[^/]+/mcp/", server["url"]), server
    assert server["headers"] == {"Authorization": f"Bearer {secret}"}, server


def test_vscode_reads_servers_with_a_prompted_token() -> None:
    config = json.loads(readme_block("config-vscode", "json"))
    (prompt,) = config["inputs"]
    assert prompt["type"] == "promptString" and prompt["password"] is True
    server = config["servers"]["workspaces"]
    assert server["type"] == "http"
    assert_endpoint(server, f"${{input:{prompt['id']}}}")


def test_cursor_reads_mcp_servers_with_the_token_from_the_environment() -> None:
    server = json.loads(readme_block("config-cursor", "json"))["mcpServers"]["workspaces"]
    assert_endpoint(server, "${env:MODAL_WORKSPACE_MCP_TOKEN}")


def test_copilot_reads_an_http_server_with_a_copilot_secret() -> None:
    server = json.loads(readme_block("config-copilot", "json"))["mcpServers"]["workspaces"]
    assert server["type"] == "http" and server["tools"] == ["*"]
    # The coding agent passes only secrets named COPILOT_MCP_* to MCP servers.
    assert_endpoint(server, "$COPILOT_MCP_WORKSPACE_TOKEN")


def test_claude_code_adds_an_http_server_with_a_header() -> None:
    argv = shlex.split(readme_block("config-claude-code", "sh"))
    assert argv[:4] == ["claude", "mcp", "add", "--transport"], argv
    assert argv[4] == "http" and argv[5] == "workspaces"
    assert re.fullmatch(r"https?://[^/]+/mcp/", argv[6]), argv
    assert argv[7:] == ["--header", "Authorization: Bearer $MODAL_WORKSPACE_MCP_TOKEN"]


@pytest.mark.parametrize("name", ["config-vscode", "config-cursor", "config-copilot"])
def test_no_quickstart_holds_a_token(name: str) -> None:
    assert "test-token" not in readme_block(name, "json") and "ghp_" not in readme_block(
        name, "json"
    )
