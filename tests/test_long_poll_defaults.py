"""A long-poll's default wait answers before a client's read timeout: HTTP clients commonly
default to 5 s, so a client that names no `wait_seconds` and keeps its library's timeouts gets
a page (empty, if nothing happened) instead of a ReadTimeout, on every surface."""

from __future__ import annotations

from typing import get_args

from modal_workspace_core.config import load_settings
from modal_workspace_core.operations import OPERATIONS
from modal_workspace_core.operations.machinery.limits import Surface
from modal_workspace_core.operations.machinery.pages import EventsRead
from modal_workspace_core.surfaces.mcp import tools

# What a client with default timeouts waits at most, less a margin for the answer's way back.
CLIENT_READ_TIMEOUT = 5.0
MOST_DEFAULT_WAIT = 4.0

LONG_POLLS = [op for op in OPERATIONS if issubclass(op.input, EventsRead)]
WORKSPACE = "ws-" + "0" * 32


def test_the_long_polls_are_the_cursor_reads() -> None:
    names = {op.name for op in LONG_POLLS}
    assert names >= {
        "workspace_realtime_exec_events",
        "workspace_file_watch_events",
        "stream_events",
    }


def test_every_long_polls_default_wait_leaves_a_margin_under_a_5_s_read_timeout() -> None:
    assert MOST_DEFAULT_WAIT < CLIENT_READ_TIMEOUT
    for op in LONG_POLLS:
        for surface in get_args(Surface):
            model = op.input_for(surface)
            default = model.model_fields["wait_seconds"].default
            assert 0 < default <= MOST_DEFAULT_WAIT, (op.name, surface, default)
            # The default a call gets when it names none, as the schema a client reads says it.
            assert model.model_json_schema()["properties"]["wait_seconds"]["default"] == default


def test_the_mcp_tools_list_says_the_same_default() -> None:
    names = {op.name for op in LONG_POLLS}
    listed = [tool for tool in tools(load_settings({})) if tool.name in names]
    assert {tool.name for tool in listed} == names
    for tool in listed:
        default = tool.input_schema["properties"]["wait_seconds"]["default"]
        assert default <= MOST_DEFAULT_WAIT, tool.name
