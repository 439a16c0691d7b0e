"""The git command lines of the repo operations, run for real against local repositories
(`url.<path>.insteadOf` maps the canonical GitHub URL to them, as the end-to-end tests do over
HTTP), and the parser of `git status --porcelain=v2`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from modal_workspace_core import gitcmd

URL = "https://github.com/octo/hello.git"


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True, timeout=60
    )
    return result.stdout


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def git_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    config = home / "gitconfig"
    config.write_text(
        "[user]\n\tname = T\n\temail = t@example.org\n[init]\n\tdefaultBranch = main\n"
    )
    return {
        **os.environ,
        "HOME": str(home),
        "GIT_CONFIG_GLOBAL": str(config),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
    }


@pytest.fixture
def origin(tmp_path: Path, git_env: dict[str, str]) -> Path:
    """A bare repository with main (two commits), a branch `feature` and a tag `v1`, served to
    git as https://github.com/octo/hello.git."""
    work = tmp_path / "seed"
    work.mkdir()
    git(work, "init", "-q", env=git_env)
    (work / "README.md").write_text("hello\n")
    git(work, "add", ".", env=git_env)
    git(work, "commit", "-qm", "one", env=git_env)
    git(work, "tag", "v1", env=git_env)
    git(work, "checkout", "-qb", "feature", env=git_env)
    (work / "feature.txt").write_text("feature\n")
    git(work, "add", ".", env=git_env)
    git(work, "commit", "-qm", "feature", env=git_env)
    git(work, "checkout", "-q", "main", env=git_env)
    (work / "README.md").write_text("hello\nworld\n")
    git(work, "commit", "-qam", "two", env=git_env)
    bare = tmp_path / "hello.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare), env=git_env)
    git(tmp_path, "config", "--global", f"url.{bare}.insteadOf", URL, env=git_env)
    return bare


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    return root


def test_clone_argv_puts_the_url_and_destination_after_a_double_dash() -> None:
    argv = gitcmd.clone_argv(URL, "hello", "main", 1)
    assert argv == [
        "git",
        "clone",
        "--progress",
        "--depth=1",
        "--branch=main",
        "--",
        URL,
        "./hello",
    ]
    # A destination that starts with '-' stays a path.
    assert gitcmd.clone_argv(URL, "-x", None, None)[-1] == "./-x"


def test_clone_of_a_branch_runs_real_git(
    origin: Path, workspace: Path, git_env: dict[str, str]
) -> None:
    done = run(gitcmd.clone_argv(URL, "hello", "feature", None), workspace, git_env)
    assert done.returncode == 0, done.stderr
    assert (workspace / "hello" / "feature.txt").read_text() == "feature\n"
    assert "Cloning into" in done.stderr  # git's progress, which the events carry


def test_clone_of_a_commit_fetches_it_and_detaches(
    origin: Path, workspace: Path, git_env: dict[str, str]
) -> None:
    first = git(origin, "rev-parse", "v1", env=git_env).strip()
    done = run(gitcmd.clone_argv(URL, "hello", first, 1), workspace, git_env)
    assert done.returncode == 0, done.stderr
    assert git(workspace / "hello", "rev-parse", "HEAD", env=git_env).strip() == first
    assert (workspace / "hello" / "README.md").read_text() == "hello\n"


def test_fetch_and_checkout_of_a_remote_branch(
    origin: Path, workspace: Path, git_env: dict[str, str]
) -> None:
    assert run(gitcmd.clone_argv(URL, "hello", None, None), workspace, git_env).returncode == 0
    assert run(gitcmd.fetch_argv("hello", None, None), workspace, git_env).returncode == 0
    done = run(gitcmd.checkout_argv("hello", "feature", False), workspace, git_env)
    assert done.returncode == 0, done.stderr
    assert git(workspace / "hello", "branch", "--show-current", env=git_env).strip() == "feature"
    new = run(gitcmd.checkout_argv("hello", "topic/x", True), workspace, git_env)
    assert new.returncode == 0, new.stderr
    assert git(workspace / "hello", "branch", "--show-current", env=git_env).strip() == "topic/x"


def test_checkout_never_reads_the_ref_as_a_file_to_overwrite(
    origin: Path, workspace: Path, git_env: dict[str, str]
) -> None:
    assert run(gitcmd.clone_argv(URL, "hello", None, None), workspace, git_env).returncode == 0
    readme = workspace / "hello" / "README.md"
    readme.write_text("local edits\n")
    done = run(gitcmd.checkout_argv("hello", "README.md", False), workspace, git_env)
    assert done.returncode != 0
    assert readme.read_text() == "local edits\n"


def test_diff_shows_untracked_files_as_new_without_touching_the_index(
    origin: Path, workspace: Path, git_env: dict[str, str]
) -> None:
    assert run(gitcmd.clone_argv(URL, "hello", None, None), workspace, git_env).returncode == 0
    repo = workspace / "hello"
    (repo / "README.md").write_text("changed\n")
    (repo / "new.txt").write_text("brand new\n")
    (repo / ".gitignore").write_text("ignored.txt\n")
    (repo / "ignored.txt").write_text("secret-ish\n")
    index = (repo / ".git" / "index").read_bytes()
    patch = run(gitcmd.diff_argv("hello", stat=False, cached=False), workspace, git_env)
    assert patch.returncode == 0, patch.stderr
    assert "+changed" in patch.stdout
    assert "new file mode" in patch.stdout and "+brand new" in patch.stdout
    assert "b/ignored.txt" not in patch.stdout  # ignored files stay out
    stat = run(gitcmd.diff_argv("hello", stat=True, cached=False), workspace, git_env)
    assert "new.txt" in stat.stdout and "files changed" in stat.stdout
    assert (repo / ".git" / "index").read_bytes() == index
    assert not list((repo / ".git").glob("mwc-diff-index.*"))
    git(repo, "add", "README.md", env=git_env)
    cached = run(gitcmd.diff_argv("hello", stat=False, cached=True), workspace, git_env)
    assert "+changed" in cached.stdout and "new.txt" not in cached.stdout


def test_status_is_parsed_from_real_porcelain_output(
    origin: Path, workspace: Path, git_env: dict[str, str]
) -> None:
    assert run(gitcmd.clone_argv(URL, "hello", None, None), workspace, git_env).returncode == 0
    repo = workspace / "hello"
    clean = run(gitcmd.status_argv("hello"), workspace, git_env)
    parsed = gitcmd.parse_status(clean.stdout)
    assert parsed["clean"] is True
    assert parsed["branch"] == "main" and parsed["upstream"] == "origin/main"
    assert len(str(parsed["head"])) == 40
    (repo / "README.md").write_text("changed\n")
    git(repo, "mv", "README.md", "READ ME.md", env=git_env)
    (repo / "untracked file.txt").write_text("x\n")
    git(repo, "commit", "-qm", "local", "--allow-empty", env=git_env)
    (repo / "READ ME.md").write_text("again\n")
    parsed = gitcmd.parse_status(run(gitcmd.status_argv("hello"), workspace, git_env).stdout)
    entries = {e["path"]: e for e in parsed["entries"]}  # type: ignore[attr-defined]
    assert entries["READ ME.md"]["worktree"] == "M"
    assert entries["untracked file.txt"]["index"] == "?"
    assert parsed["ahead"] == 1 and parsed["behind"] == 0
    assert parsed["clean"] is False


def test_parse_status_reads_renames_with_their_original_path() -> None:
    out = (
        "# branch.oid (initial)\0# branch.head (detached)\0"
        "2 R. N... 100644 100644 100644 abc abc R100 new name.txt\0old name.txt\0"
        "? other\0"
    )
    parsed = gitcmd.parse_status(out)
    assert parsed["head"] is None and parsed["branch"] is None
    assert parsed["entries"] == [
        {"path": "new name.txt", "index": "R", "worktree": ".", "orig_path": "old name.txt"},
        {"path": "other", "index": "?", "worktree": "?"},
    ]


def test_askpass_answers_from_the_environment_and_the_runner_makes_it_executable(
    tmp_path: Path,
) -> None:
    script = tmp_path / "askpass"
    script.write_text(gitcmd.ASKPASS_SCRIPT)
    assert "tok-123" not in gitcmd.ASKPASS_SCRIPT
    env = {**os.environ, gitcmd.TOKEN_ENV: "tok-123"}
    argv = gitcmd.with_askpass([str(script), "Password for 'https://github.com': "], str(script))
    done = run(argv, tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "tok-123\n"
    user = run([str(script), "Username for 'https://github.com': "], tmp_path, env)
    assert user.stdout == "x-access-token\n"
    assert "tok-123" not in " ".join(argv)
