"""Each output fitted to a bound on its JSON (`operations/machinery/fitting.py`, the ways each
output class declares in `gives_less`), with parts of unequal size: the room goes where the
content is, and what is cut says so."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest
from modal_workspace_core.errors import UpstreamError
from modal_workspace_core.operations.artifacts import ArtifactListing
from modal_workspace_core.operations.execs import ExecListResult, ExecResult
from modal_workspace_core.operations.files import FileContent, FileListResult, FileSearchResult
from modal_workspace_core.operations.machinery.fields import Output
from modal_workspace_core.operations.machinery.fitting import KeepFirst, fit_json
from modal_workspace_core.operations.repo.delivery import (
    PushedCommit,
    RepoCommitResult,
    RepoPushResult,
)
from modal_workspace_core.operations.repo.status import RepoDiff, RepoStatus
from modal_workspace_core.operations.watches import WatchListResult
from modal_workspace_core.operations.workspaces import WorkspaceListResult
from modal_workspace_core.policy import new_id

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


def test_when_the_files_are_not_enough_the_commits_are_cut_too() -> None:
    push = _push(
        commits=[PushedCommit(commit="a" * 40, subject="s" * 2000) for _ in range(100)],
        files=["small"] * 3,
    )
    text = fit_json(push, 80_000)
    assert len(text) <= 80_000
    fitted = json.loads(text)
    assert fitted["files"] == []
    assert 0 < len(fitted["commits"]) < 100 and fitted["truncated"] is True
    # The first commits are kept whole, as they were.
    assert fitted["commits"][0] == {"commit": "a" * 40, "subject": "s" * 2000}


def test_base64_content_keeps_whole_groups_and_says_where_the_rest_starts() -> None:
    data = bytes(range(256)) * 400  # 102 400 bytes, not UTF-8
    content = base64.b64encode(data).decode()
    file = FileContent.model_validate(
        {
            "path": "/workspace/blob.bin",
            "offset": 0,
            "size": len(data),
            "content": content,
            "encoding": "base64",
            "next_offset": len(data),
            "eof": True,
        }
    )
    text = fit_json(file, 50_000)
    assert len(text) <= 50_000
    fitted = json.loads(text)
    kept = fitted["content"]
    assert len(kept) % 4 == 0 and content.startswith(kept) and len(kept) > 49_000
    assert fitted["next_offset"] == len(base64.b64decode(kept))
    assert data.startswith(base64.b64decode(kept)) and fitted["eof"] is False


def test_a_diff_keeps_its_start_and_its_facts() -> None:
    diff = "+" + "d" * 300_000
    result = RepoDiff(
        destination="/workspace/" + "r" * 3,
        cached=False,
        stat=False,
        diff=diff,
        truncated=False,
        bytes=len(diff),
    )
    text = fit_json(result, MOST)
    assert MOST - 200 < len(text) <= MOST
    fitted = json.loads(text)
    assert diff.startswith(fitted["diff"]) and fitted["truncated"] is True
    assert (fitted["destination"], fitted["bytes"]) == ("/workspace/rrr", len(diff))


# Every output that gives less by keeping its first entries: how to make one whose entries carry
# the given texts, and the list field it cuts.
Listing = Callable[[list[str]], Output]
LISTINGS: dict[str, tuple[Listing, str]] = {
    "FileListResult": (
        lambda texts: FileListResult.model_validate(
            {"path": "/workspace", "entries": [{"path": t, "kind": "file"} for t in texts]}
        ),
        "entries",
    ),
    "RepoStatus": (
        lambda texts: RepoStatus.model_validate(
            {
                "destination": "/workspace/r",
                "branch": "main",
                "head": "a" * 40,
                "clean": False,
                "entries": [{"path": t, "index": "M", "worktree": "."} for t in texts],
            }
        ),
        "entries",
    ),
    "FileSearchResult": (
        lambda texts: FileSearchResult.model_validate(
            {"hits": [{"path": "/workspace/f", "line": 1, "text": t} for t in texts]}
        ),
        "hits",
    ),
    "WorkspaceListResult": (
        lambda texts: WorkspaceListResult.model_validate(
            {
                "workspaces": [
                    {
                        "workspace_id": new_id("ws"),
                        "driver": "local",
                        "root": "/workspace",
                        "created_at": "2026-01-01T00:00:00Z",
                        "tags": {"note": t},
                        "state": "running",
                    }
                    for t in texts
                ]
            }
        ),
        "workspaces",
    ),
    "ExecListResult": (
        lambda texts: ExecListResult.model_validate(
            {"execs": [{"exec_id": new_id("ex"), "state": "failed", "error": t} for t in texts]}
        ),
        "execs",
    ),
    "WatchListResult": (
        lambda texts: WatchListResult.model_validate(
            {"watches": [{"watch_id": new_id("fw"), "path": t} for t in texts]}
        ),
        "watches",
    ),
    "RepoCommitResult": (
        lambda texts: RepoCommitResult.model_validate(
            {
                "destination": "/workspace/r",
                "commit": "c" * 40,
                "branch": "main",
                "files": [{"path": t, "added": 1, "removed": 0} for t in texts],
            }
        ),
        "files",
    ),
    "ArtifactListing": (
        lambda texts: ArtifactListing.model_validate(
            {
                "path": "/workspace/out",
                "kind": "dir",
                "size": 1,
                "entries": len(texts),
                "listing": [{"path": t, "kind": "file", "size": 1} for t in texts],
                "truncated": False,
            }
        ),
        "listing",
    ),
}


@pytest.mark.parametrize("name", sorted(LISTINGS))
def test_a_list_keeps_its_first_entries_whole_even_when_a_later_one_is_small(name: str) -> None:
    make, field = LISTINGS[name]
    # Small entries, one far over the bound, then small ones again: the answer is the first
    # entries in order (never the small ones after the one that cannot fit), each unchanged.
    texts = ["a" * 10] * 5 + ["b" * 200_000] + ["c" * 10] * 5
    listing = make(texts)
    text = fit_json(listing, MOST)
    assert len(text) <= MOST
    fitted = json.loads(text)
    assert fitted[field] == json.loads(listing.model_dump_json())[field][:5]
    assert fitted["truncated"] is True


@pytest.mark.parametrize("name", sorted(LISTINGS))
def test_a_list_keeps_as_many_entries_of_unequal_size_as_fit(name: str) -> None:
    make, field = LISTINGS[name]
    texts = [str(i) * (300 * i) for i in range(1, 40)]  # 300 to 11 700 characters each
    text = fit_json(make(texts), MOST)
    assert len(text) <= MOST
    kept = len(json.loads(text)[field])
    assert 0 < kept < len(texts)
    # As many as fit: one more would not have.
    one_more = make(texts[: kept + 1]).model_copy(update={"truncated": True})
    assert len(one_more.model_dump_json()) > MOST


def test_an_output_that_declares_no_way_to_give_less_is_refused_when_too_large() -> None:
    class Unbounded(Output):
        text: str

    with pytest.raises(UpstreamError) as refused:
        fit_json(Unbounded(text="x" * 200_000), MOST)
    assert "ask for less" in str(refused.value)


def test_a_way_to_give_less_must_name_a_field_of_its_kind() -> None:
    with pytest.raises(TypeError, match="KeepFirst needs a list field 'entries'"):

        class Misdeclared(Output):
            entries: str
            truncated: bool = False

            gives_less = (KeepFirst("entries"),)


def _push(commits: list[PushedCommit], files: list[str]) -> RepoPushResult:
    return RepoPushResult(
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
        commits=commits,
        commit_count=len(commits),
        files=files,
        file_count=len(files),
    )
