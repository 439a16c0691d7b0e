"""The service's small rules: canonical defaults, output capping, text decoding of file reads,
idempotent exec ids, when a page is `done`, and how failures become the error model."""

from __future__ import annotations

import hashlib
from pathlib import Path

from modal_workspace_core import policy
from modal_workspace_core._core import AGENT_OPS, REPEATABLE_AGENT_OPS
from modal_workspace_core.config import load_settings
from modal_workspace_core.errors import (
    AgentError,
    NotFoundError,
    PermissionDeniedError,
    UpstreamError,
    WorkspaceError,
    from_agent_error,
    translate_error,
)
from modal_workspace_core.git.delivery import parse_push_report
from modal_workspace_core.operations.exec_engine import Capture
from modal_workspace_core.operations.execs import derived_exec_id
from modal_workspace_core.operations.files import FileList, FileSearch, decode_text
from modal_workspace_core.operations.watches import WatchStart
from modal_workspace_core.runtime.channels import REPEATABLE_OPS

WS = "ws-" + "a" * 32


def test_default_paths_are_canonical_like_client_paths() -> None:
    assert FileList(workspace_id=WS).path == "/workspace"
    assert FileSearch(workspace_id=WS, pattern="x").path == "/workspace"
    assert WatchStart(workspace_id=WS).path == "/workspace"


def test_the_repeatable_agent_ops_come_from_the_cores_table() -> None:
    assert REPEATABLE_OPS is REPEATABLE_AGENT_OPS
    assert set(AGENT_OPS) > REPEATABLE_OPS
    never_twice = {
        "exec.input",
        "exec.resize",
        "file.edit",
        "file.patch",
        "file.remove",
        "watch.start",
        "task.progress",
        # An upload's staged archive is consumed by its extraction: a second one finds none.
        "archive.extract",
        # A relay's opening: twice is two connections.
        "port.connect",
    }
    assert set(AGENT_OPS) - REPEATABLE_OPS == never_twice
    protocol = (Path(__file__).parents[1] / "docs" / "protocol.md").read_text()
    for op in AGENT_OPS:
        assert f"`{op}`" in protocol, op


def test_capture_keeps_head_and_tail_and_counts_everything() -> None:
    cap = Capture(cap=10)
    for chunk in (b"0123", b"4567", b"89ab", b"cdef"):
        cap.add(chunk)
    assert cap.total == 16 and cap.truncated
    assert cap.text() == "01234\n[... 6 bytes omitted ...]\nbcdef"
    small = Capture(cap=10)
    small.add(b"hello")
    assert (small.text(), small.truncated) == ("hello", False)
    head = Capture(cap=4, head_only=True)
    head.add(b"abcdefgh")
    assert (bytes(head.head), head.total, head.truncated) == (b"abcd", 8, True)


def test_a_read_cut_inside_a_character_returns_whole_characters() -> None:
    assert decode_text("é".encode() * 2, complete=True) == ("éé", "utf-8", 4)
    cut = "aé".encode()[:2]  # 'a' and the first byte of 'é'
    assert decode_text(cut, complete=False) == ("a", "utf-8", 1)
    content, encoding, used = decode_text(b"\xff\xfe\x00", complete=True)
    assert (content, encoding, used) == ("//4A", "base64", 3)


def test_an_idempotency_key_names_one_exec_per_workspace() -> None:
    secret = b"gateway secret"
    a = derived_exec_id(WS, "key", secret)
    assert a == derived_exec_id(WS, "key", secret)
    assert policy.check_id("ex", a) == a
    assert a != derived_exec_id(WS, "other", secret)
    assert a != derived_exec_id("ws-" + "b" * 32, "key", secret)


def test_an_exec_id_cannot_be_derived_without_the_gateways_secret() -> None:
    # A command knows its workspace id and can guess the key; not the gateway's tokens.
    unkeyed = "ex-" + hashlib.sha256(f"{WS}\x00key".encode()).hexdigest()[:32]
    one = load_settings({"MODAL_WORKSPACE_MCP_TOKEN": "token-one-123"}, data_root=Path("/d"))
    two = load_settings({"MODAL_WORKSPACE_MCP_TOKEN": "token-two-456"}, data_root=Path("/d"))
    ids = {derived_exec_id(WS, "key", s.idempotency_secret) for s in (one, two)}
    assert len(ids) == 2 and unkeyed not in ids


def test_agent_codes_map_to_statuses() -> None:
    assert isinstance(from_agent_error("not_found", "no exec"), NotFoundError)
    assert from_agent_error("permission", "x").status == 403
    assert from_agent_error("limit", "x").status == 413
    assert from_agent_error("unavailable", "gone").status == 502
    strange = from_agent_error("weird", "boom")
    assert isinstance(strange, UpstreamError) and "weird" in strange.message


def test_policy_errors_name_the_field_and_allowlists_are_403() -> None:
    try:
        policy.allowed("prod", [], "MODAL_WORKSPACE_ALLOWED_SECRETS")
    except policy.PolicyError as exc:
        err = translate_error(exc, "secret_names[0]")
    assert isinstance(err, PermissionDeniedError) and err.field == "secret_names[0]"
    try:
        policy.git_ref("a..b")
    except policy.PolicyError as exc:
        bad = translate_error(exc, "ref")
    assert bad.status == 400 and bad.message.startswith("ref: ")


def test_an_unexpected_failure_is_a_502_that_names_no_detail() -> None:
    err = translate_error(RuntimeError("secret-ish internal detail"))
    assert err.status == 502 and "secret-ish" not in err.message


def test_an_agent_error_keeps_the_field_the_agent_named() -> None:
    body = '{"code": "invalid_argument", "message": "kinds are create, …", "field": "kinds"}'
    err = translate_error(AgentError.from_body(body))
    assert (err.code, err.field, err.status) == ("invalid_argument", "kinds", 400)
    assert translate_error(AgentError.from_body('{"code": "not_found"}')).field is None
    # The caller's own name for the input wins over the agent's.
    assert translate_error(AgentError.from_body(body), "path").field == "path"


def test_an_agent_error_is_one_of_the_family_and_answers_as_a_caller_sees_it() -> None:
    lost = AgentError("unavailable", "the agent closed the channel")
    assert isinstance(lost, WorkspaceError) and lost.channel_lost and lost.status == 502
    # The agent's own failures read `upstream`, whichever surface renders them.
    assert lost.to_dict() == {
        "error": {"code": "upstream", "message": "the agent closed the channel"}
    }
    assert translate_error(lost).code == "upstream"
    refused = AgentError("conflict", "the exec has ended", "exec_id")
    assert not refused.channel_lost and refused.status == 409
    assert refused.to_dict()["error"] == {
        "code": "conflict",
        "message": "the exec has ended",
        "field": "exec_id",
    }


def test_no_error_names_a_hidden_host_path() -> None:
    from modal_workspace_core.errors import UpstreamError, without_host_paths

    err = UpstreamError("mount failed: /srv/data/ws-1/disk.img and /srv/data-two/x")
    shown = without_host_paths(err, ("/srv/data", "/srv/data-two"))
    assert shown.message == "mount failed: <data root>/ws-1/disk.img and <data root>/x"
    assert "/srv" not in str(shown) and "/srv" not in str(shown.to_dict())


def test_a_push_created_its_branch_only_when_its_report_says_so_twice() -> None:
    new, old = "a" * 40, "b" * 40
    fresh = f"ref {new} none\ncount 1\nfiles 1\nstatus *\trefs/mwc/push:refs/heads/x\t[new branch]"
    assert parse_push_report(fresh + "\npushed\n").created("x")
    # Not pushed, another branch's answer, or a remote that had the branch: not created.
    assert not parse_push_report(fresh + "\n").created("x")
    assert not parse_push_report(fresh + "\npushed\n").created("y")
    had = fresh.replace(f"{new} none", f"{new} {old}")
    assert not parse_push_report(had + "\npushed\n").created("x")
    forwarded = fresh.replace("*\t", " \t").replace("[new branch]", f"{old[:7]}..{new[:7]}")
    assert not parse_push_report(forwarded + "\npushed\n").created("x")


def test_a_push_report_cut_at_its_bound_loses_only_its_cut_line() -> None:
    report = f"ref {'a' * 40} none\npushed\nfile one.txt\nfile tw"
    assert parse_push_report(report).files == ["one.txt", "tw"]
    cut = parse_push_report(report, truncated=True)
    assert cut.pushed and cut.files == ["one.txt"]
