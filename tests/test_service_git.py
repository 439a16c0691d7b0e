"""The git command lines of the repo operations, run for real: the network step (as the agent
would run it, with its fixed environment; a stand-in askpass answers as the agent's would)
against the test git server over HTTP into a mirror, then the workspace step from the mirror;
the steps that report on the exec's report channel (a template's build and checks); and the
parser of `git status --porcelain=v2`. The agent's own askpass is tested through a real daemon
(tests/test_agent_daemon.py, tests/security/test_git_token.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from modal_workspace_core.git import commands as gitcmd
from support.git_server import GitServer

SLUG = "octo/hello"
# What the agent answers git's prompts with for a step's credential.
STAND_IN_ASKPASS = """#!/bin/sh
case "$1" in
  Username*) echo x-access-token ;;
  *) printf '%s\\n' "$STAND_IN_TOKEN" ;;
esac
"""


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True, timeout=60
    )
    return result.stdout


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def git_env(tmp_path: Path) -> dict[str, str]:
    """A workspace command's environment: a home with a git identity."""
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
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    return root


class TwoSteps:
    """Runs a clone or fetch as the agent runs its two steps."""

    def __init__(self, server: GitServer, tmp_path: Path, workspace: Path, env: dict[str, str]):
        self.server, self.workspace, self.env = server, workspace, env
        self.agent_dir = tmp_path / "agent"
        (self.agent_dir / "home").mkdir(parents=True)
        self.base = server.base_url.rstrip("/")
        self.askpass = tmp_path / "askpass.sh"
        self.askpass.write_text(STAND_IN_ASKPASS)
        self.askpass.chmod(0o700)

    def network_env(self) -> dict[str, str]:
        fixed = {"PATH": os.environ["PATH"], "HOME": str(self.agent_dir / "home")}
        env = {**fixed, **gitcmd.mirror_env(str(self.askpass))}
        return {**env, "STAND_IN_TOKEN": self.server.token}

    def mirror(self, dest: str) -> str:
        return gitcmd.mirror_path(str(self.agent_dir), f"/workspace/{dest}")

    def clone(
        self, dest: str, ref: str | None = None, depth: int | None = None
    ) -> subprocess.CompletedProcess[str]:
        url, mirror = self.server.repo_url(SLUG), self.mirror(dest)
        argv = gitcmd.mirror_argv("clone", url, mirror, ref, depth, self.base)
        first = run(argv, self.agent_dir / "home", self.network_env())
        if first.returncode != 0:
            return first
        step = gitcmd.clone_from_mirror_argv(mirror, dest, ref, depth, url)
        return run(step, self.workspace, self.env)

    def fetch(self, dest: str, ref: str | None = None) -> subprocess.CompletedProcess[str]:
        url, mirror = self.server.repo_url(SLUG), self.mirror(dest)
        argv = gitcmd.mirror_argv("fetch", url, mirror, ref, None, self.base)
        first = run(argv, self.agent_dir / "home", self.network_env())
        if first.returncode != 0:
            return first
        return run(gitcmd.fetch_from_mirror_argv(mirror, dest, ref, None), self.workspace, self.env)


@pytest.fixture
def steps(
    git_server: GitServer, tmp_path: Path, workspace: Path, git_env: dict[str, str]
) -> TwoSteps:
    return TwoSteps(git_server, tmp_path, workspace, git_env)


def test_the_network_step_reads_no_configuration_and_allows_only_http_transports() -> None:
    argv = gitcmd.mirror_argv(
        "clone", "https://github.com/o/r.git", "/m", None, None, "https://github.com"
    )
    assert "protocol.allow=never" in argv and "core.hooksPath=/dev/null" in argv
    assert "protocol.http.allow=always" not in argv  # only for a plain-http (test) base
    assert "http.sslVerify=true" in argv
    env = gitcmd.mirror_env("/pkg/git_askpass.sh")
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null" and env["GIT_CONFIG_NOSYSTEM"] == "1"
    assert env["GIT_ASKPASS"] == "/pkg/git_askpass.sh"
    assert "GIT_ASKPASS" not in gitcmd.mirror_env(None)


def test_clone_of_a_branch_runs_real_git(steps: TwoSteps, workspace: Path) -> None:
    done = steps.clone("hello", "feature")
    assert done.returncode == 0, done.stderr
    assert (workspace / "hello" / "src" / "feature.py").read_text() == "FEATURE = True\n"
    assert "Cloning into" in done.stderr  # git's progress, which the events carry
    origin = git(workspace / "hello", "remote", "get-url", "origin")
    assert origin.strip() == steps.server.repo_url(SLUG)
    assert steps.server.token in steps.server.passwords


def test_clone_of_a_commit_fetches_it_and_detaches(
    steps: TwoSteps, workspace: Path, git_env: dict[str, str]
) -> None:
    bare = steps.server.root / f"{SLUG}.git"
    first = git(bare, "rev-parse", "main", env=git_env).strip()
    done = steps.clone("hello", first, 1)
    assert done.returncode == 0, done.stderr
    assert git(workspace / "hello", "rev-parse", "HEAD", env=git_env).strip() == first


def test_fetch_and_checkout_of_a_remote_branch(
    steps: TwoSteps, workspace: Path, git_env: dict[str, str]
) -> None:
    assert steps.clone("hello").returncode == 0
    fetched = steps.fetch("hello")
    assert fetched.returncode == 0, fetched.stderr
    done = run(gitcmd.checkout_argv("hello", "feature", False), workspace, git_env)
    assert done.returncode == 0, done.stderr
    assert git(workspace / "hello", "branch", "--show-current", env=git_env).strip() == "feature"
    new = run(gitcmd.checkout_argv("hello", "topic/x", True), workspace, git_env)
    assert new.returncode == 0, new.stderr
    assert git(workspace / "hello", "branch", "--show-current", env=git_env).strip() == "topic/x"


def test_a_fetch_of_a_named_ref_leaves_it_in_fetch_head(
    steps: TwoSteps, workspace: Path, git_env: dict[str, str]
) -> None:
    assert steps.clone("hello").returncode == 0
    assert steps.fetch("hello", "release/1.0").returncode == 0
    shown = git(workspace / "hello", "show", "FETCH_HEAD:VERSION", env=git_env)
    assert shown == "1.0\n"


def test_checkout_never_reads_the_ref_as_a_file_to_overwrite(
    steps: TwoSteps, workspace: Path, git_env: dict[str, str]
) -> None:
    assert steps.clone("hello").returncode == 0
    readme = workspace / "hello" / "README.md"
    readme.write_text("local edits\n")
    done = run(gitcmd.checkout_argv("hello", "README.md", False), workspace, git_env)
    assert done.returncode != 0
    assert readme.read_text() == "local edits\n"


def test_diff_shows_untracked_files_as_new_without_touching_the_index(
    steps: TwoSteps, workspace: Path, git_env: dict[str, str]
) -> None:
    assert steps.clone("hello").returncode == 0
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
    steps: TwoSteps, workspace: Path, git_env: dict[str, str]
) -> None:
    assert steps.clone("hello").returncode == 0
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


def reported(argv: list[str], cwd: Path, env: dict[str, str], tmp_path: Path) -> str:
    """What a step wrote on its report channel (descriptor 3, as the agent gives a step with
    `report: true`), after checking that it ran well."""
    channel = tmp_path / "report"
    with channel.open("wb") as fd3:
        done = subprocess.run(
            ["sh", "-c", 'exec "$@" 3>&0 0</dev/null', "sh", *argv],
            cwd=cwd,
            env={**env, "MWC_REPORT_FD": "3"},
            stdin=fd3,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    return channel.read_text()


def test_a_clones_commit_is_reported_from_the_mirror_for_each_kind_of_ref(
    steps: TwoSteps, git_env: dict[str, str], tmp_path: Path
) -> None:
    bare = steps.server.root / f"{SLUG}.git"
    git(bare, "tag", "-a", "v1", "-m", "a release", "feature", env=git_env)
    for ref, names in ((None, "main"), ("feature", "feature"), ("v1", "v1^{commit}")):
        dest = f"hello-{ref}"
        assert steps.clone(dest, ref).returncode == 0
        argv = gitcmd.mirror_head_argv(steps.mirror(dest), ref)
        head = gitcmd.report_head(reported(argv, steps.agent_dir, git_env, tmp_path))
        assert head == git(bare, "rev-parse", names, env=git_env).strip(), ref


def test_a_step_without_its_report_channel_refuses_to_run(steps: TwoSteps, tmp_path: Path) -> None:
    argv = gitcmd.mirror_head_argv(steps.mirror("hello"), None)
    done = run(argv, tmp_path, {"PATH": os.environ["PATH"]})
    assert done.returncode == 1 and "cannot report" in done.stderr


def test_a_remotes_ref_is_asked_over_the_network_branch_first_then_the_peeled_tag(
    steps: TwoSteps, git_env: dict[str, str], tmp_path: Path
) -> None:
    bare = steps.server.root / f"{SLUG}.git"
    git(bare, "tag", "-a", "v1", "-m", "a release", "feature", env=git_env)
    git(bare, "tag", "release/1.0", "main", env=git_env)  # a branch's name: the branch wins
    url = steps.server.repo_url(SLUG)
    for ref, expected in (
        (None, "main"),
        ("feature", "feature"),
        ("v1", "v1^{commit}"),
        ("release/1.0", "refs/heads/release/1.0"),
    ):
        argv = gitcmd.remote_refs_argv(url, ref, steps.base)
        report = reported(argv, steps.agent_dir / "home", steps.network_env(), tmp_path)
        head = gitcmd.remote_head(report, ref)
        assert head == git(bare, "rev-parse", expected, env=git_env).strip(), (ref, report)
    missing = reported(
        gitcmd.remote_refs_argv(url, "gone", steps.base),
        steps.agent_dir / "home",
        steps.network_env(),
        tmp_path,
    )
    assert gitcmd.remote_head(missing, "gone") is None
