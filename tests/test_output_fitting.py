"""Each output fitted to a byte bound (`surfaces/rest/fit.py`), with parts of unequal size: the
room goes where the content is, and what is cut says so."""

from __future__ import annotations

import json

from modal_workspace_core.operations.execs import ExecResult
from modal_workspace_core.operations.files import FileContent
from modal_workspace_core.operations.repo.delivery import PushedCommit, RepoPushResult
from modal_workspace_core.policy import new_id
from modal_workspace_core.surfaces.rest.fit import fit_json

MOST = 100_000


def _exec(stdout: str, stderr: str) -> ExecResult:
    return ExecResult(
        exec_id=new_id("ex"),
        state="finished",
        returncode=0,
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=False,
        stderr_truncated=False,
        stdout_bytes=len(stdout),
        stderr_bytes=len(stderr),
        timed_out=False,
    )


def test_a_small_stream_keeps_all_it_has_and_the_large_one_takes_the_rest() -> None:
    for small, large in (("stdout", "stderr"), ("stderr", "stdout")):
        parts = {small: "abc", large: "x" * 200_000}
        text = fit_json(_exec(**parts), MOST)
        assert len(text) <= MOST
        fitted = json.loads(text)
        assert fitted[small] == "abc" and fitted[f"{small}_truncated"] is False
        # Nearly all the room is the large stream's: its head and its tail, marked as cut.
        assert len(fitted[large]) > MOST * 0.9, (large, len(fitted[large]))
        assert fitted[f"{large}_truncated"] is True
        assert "characters omitted" in fitted[large]
        assert fitted[large].startswith("xxx") and fitted[large].endswith("xxx")


def test_two_large_streams_share_the_room() -> None:
    text = fit_json(_exec("o" * 150_000, "e" * 150_000), MOST)
    assert len(text) <= MOST
    fitted = json.loads(text)
    assert abs(len(fitted["stdout"]) - len(fitted["stderr"])) < 1000
    assert fitted["stdout_truncated"] and fitted["stderr_truncated"]


def test_escaped_content_is_counted_as_it_is_sent() -> None:
    # A quote costs two characters in JSON, a control character six.
    fitted = fit_json(_exec("a", '"\x01' * 60_000), MOST)
    assert len(fitted) <= MOST
    assert json.loads(fitted)["stdout"] == "a"


def test_file_content_keeps_a_prefix_and_says_where_the_rest_starts() -> None:
    content = "é" * 80_000  # two bytes each: next_offset counts bytes, not characters
    file = FileContent.model_validate(
        {
            "path": "/workspace/f",
            "offset": 10,
            "size": 10 + len(content.encode()),
            "content": content,
            "encoding": "utf-8",
            "next_offset": 10 + len(content.encode()),
            "eof": True,
        }
    )
    fitted = json.loads(fit_json(file, 50_000))
    kept = fitted["content"]
    assert content.startswith(kept) and 0 < len(kept) < len(content)
    assert fitted["next_offset"] == 10 + len(kept.encode())
    assert fitted["eof"] is False


def test_a_push_gives_up_its_file_list_before_its_commits() -> None:
    push = RepoPushResult(
        exec_id=new_id("ex"),
        state="finished",
        pushed=True,
        repository="https://github.com/octo/hello",
        destination="/workspace/hello",
        branch="b",
        remote_branch="agent/b",
        branch_url="https://github.com/octo/hello/tree/agent/b",
        created=True,
        forced=False,
        commits=[PushedCommit(commit="a" * 40, subject="s" * 300) for _ in range(200)],
        commit_count=200,
        files=["f" * 400 + str(i) for i in range(200)],
        file_count=200,
    )
    fitted = json.loads(fit_json(push, 80_000))
    assert len(fitted["commits"]) == 200
    assert len(fitted["files"]) < 200
    assert fitted["truncated"] is True
