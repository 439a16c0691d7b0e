"""git's progress lines as the CLI's clone bar reads them (surfaces/cli/git_progress.py)."""

from __future__ import annotations

from modal_workspace_core.surfaces.cli.git_progress import GitProgress


def test_progress_rewritten_in_place_and_cut_anywhere_is_read() -> None:
    git = GitProgress()
    stream = (
        "Cloning into 'hello'...\n"
        "remote: Counting objects:  16% (1/6)\rremote: Counting objects: 100% (6/6), done.\n"
        "Receiving objects:  33% (2/6)\rReceiving objects:  83% (5/6)\r"
    )
    moved = [git.feed(stream[i : i + 7]) for i in range(0, len(stream), 7)]
    assert any(moved)
    assert (git.phase, git.done, git.total) == ("Receiving objects", 5, 6)
    assert git.lines == ["Cloning into 'hello'..."]


def test_lines_that_are_not_progress_are_kept_for_a_failure() -> None:
    git = GitProgress()
    assert not git.feed("fatal: repository 'https://github.com/o/r/' not found\n")
    assert git.lines == ["fatal: repository 'https://github.com/o/r/' not found"]
