"""The repo operations' workspace steps (the commit, the push's bundle, the working-tree diff)
when other processes of the workspace write lines into their output: any process of the
workspace's uid can open `/proc/<pid>/fd/1` of a step's git and write there, including into the
pipe of a command substitution. A `git` first on PATH stands in for that writer: it runs the real
git and writes a forged line before and after its output. Each step still does what it was asked
and says so (the hostile tenant of tests/security does the same for real, with its timing)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from modal_workspace_core.git import commands as gitcmd
from modal_workspace_core.git import delivery

FORGED = "FORGED-BY-TENANT"


@pytest.fixture
def forging_env(tmp_path: Path) -> dict[str, str]:
    real = shutil.which("git")
    assert real is not None
    shim_dir = tmp_path / "shim"
    shim_dir.mkdir()
    shim = shim_dir / "git"
    shim.write_text(
        f'#!/bin/sh\necho {FORGED}\n"{real}" "$@"\ncode=$?\necho {FORGED}\nexit $code\n'
    )
    shim.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    config = home / "gitconfig"
    config.write_text("[user]\n\tname = T\n\temail = t@example.org\n")
    return {
        **os.environ,
        "PATH": f"{shim_dir}:{os.environ['PATH']}",
        "HOME": str(home),
        "GIT_CONFIG_GLOBAL": str(config),
        "GIT_CONFIG_NOSYSTEM": "1",
    }


def real_git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


def step(argv: list[str], root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def repo(tmp_path: Path, forging_env: dict[str, str]) -> Path:
    """/workspace/repo on main: a commit origin has (by the workspace's own origin/main)."""
    root = tmp_path / "workspace"
    path = root / "repo"
    path.mkdir(parents=True)
    env = {**forging_env, "PATH": os.environ["PATH"]}
    (path / "README").write_text("hello\n")
    for args in (
        ["init", "--quiet", "--initial-branch=main"],
        ["add", "README"],
        ["commit", "--quiet", "--message=on origin"],
        ["update-ref", "refs/remotes/origin/main", "HEAD"],
    ):
        subprocess.run(["git", *args], cwd=path, env=env, check=True, timeout=60)
    return path


def test_a_commit_reports_its_commit_branch_and_files_among_forged_lines(
    repo: Path, forging_env: dict[str, str]
) -> None:
    (repo / "a.txt").write_text("one\ntwo\n")
    argv = delivery.commit_argv("repo", "add a", ["a.txt"])
    done = step(argv, repo.parent, forging_env)
    assert done.returncode == 0, done.stderr
    assert FORGED in done.stdout  # the stand-in did write between the facts
    facts = delivery.parse_commit(done.stdout)
    assert facts is not None, done.stdout
    assert facts.commit == real_git(repo, "rev-parse", "HEAD")
    assert facts.branch == "main"
    assert facts.files == [{"path": "a.txt", "added": 2, "removed": 0}]


def test_a_detached_commit_has_no_branch() -> None:
    sha = "a" * 40
    facts = delivery.parse_commit(f"hook said\nmwc-commit-done\ncommit {sha}\nrefs HEAD\n")
    assert facts is not None and facts.commit == sha and facts.branch is None
    forged_first = f"mwc-commit-done\nrefs HEAD -> forged\ncommit {sha}\nrefs HEAD -> main\n"
    facts = delivery.parse_commit(forged_first)
    assert facts is not None and facts.branch == "main"


def test_the_bundle_holds_every_commit_origin_lacks_among_forged_lines(
    repo: Path, forging_env: dict[str, str], tmp_path: Path
) -> None:
    on_origin = real_git(repo, "rev-parse", "HEAD")
    for n in range(2):
        (repo / f"f{n}").write_text(f"{n}\n")
        real_git(repo, "add", f"f{n}")
        real_git(repo, "commit", "--quiet", f"--message=new {n}")
    bundle = tmp_path / "push.bundle"
    done = step(delivery.bundle_argv("repo", "main", str(bundle)), repo.parent, forging_env)
    assert done.returncode == 0, done.stderr
    heads = real_git(repo, "bundle", "list-heads", str(bundle))
    assert heads.split() == [real_git(repo, "rev-parse", "HEAD"), "refs/heads/main"]
    # Both new commits are in it: the one commit it needs is the one origin has.
    verified = subprocess.run(
        ["git", "bundle", "verify", str(bundle)], cwd=repo, capture_output=True, text=True
    )
    assert verified.returncode == 0, verified.stderr
    assert on_origin in verified.stdout + verified.stderr
    assert "requires this ref" in verified.stdout + verified.stderr


def test_the_bundle_of_a_branch_origin_has_is_its_tip_alone(
    repo: Path, forging_env: dict[str, str], tmp_path: Path
) -> None:
    bundle = tmp_path / "push.bundle"
    done = step(delivery.bundle_argv("repo", "main", str(bundle)), repo.parent, forging_env)
    assert done.returncode == 0, done.stderr
    heads = real_git(repo, "bundle", "list-heads", str(bundle))
    assert heads.split() == [real_git(repo, "rev-parse", "HEAD"), "refs/heads/main"]


def test_the_worktree_diff_finds_its_git_directory_among_forged_lines(
    repo: Path, forging_env: dict[str, str]
) -> None:
    (repo / "new.txt").write_text("brand new\n")
    index = (repo / ".git" / "index").read_bytes()
    done = step(gitcmd.diff_argv("repo", stat=False, cached=False), repo.parent, forging_env)
    assert done.returncode == 0, done.stderr
    assert "+brand new" in done.stdout
    assert (repo / ".git" / "index").read_bytes() == index
    assert not list((repo / ".git").glob("mwc-diff-index.*"))
