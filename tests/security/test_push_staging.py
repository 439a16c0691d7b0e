"""`mwc-agent stage`, as a push's agent step runs it, against what a hostile workspace can leave
at the bundle's path in its `/tmp`: a symlink to a repository of the agent's (whose objects the
push would then send to GitHub), a directory holding a repository, a FIFO, a hard link. Each is
refused and nothing is staged; a plain file is copied."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def stage(
    root: Path, name: str, to: Path, max_bytes: str = "1M"
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-I", "-m", "modal_workspace_core.agent", "stage"]
    argv += ["--root", str(root), "--path", name, "--to", str(to), "--max-bytes", max_bytes]
    # A FIFO would hang an open without O_NONBLOCK: the timeout turns that into a failure.
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the workspace's /tmp, the agent step's private home, an agent-only repository)."""
    tmp, home, agent = tmp_path / "tmp", tmp_path / "home", tmp_path / "agent"
    for d in (tmp, home, agent):
        d.mkdir()
    subprocess.run(["git", "init", "-q", "--bare", str(agent / "mirror.git")], check=True)
    return tmp, home, agent


@pytest.mark.parametrize("plant", ["symlink-out", "directory", "fifo", "hardlink"])
def test_what_a_workspace_plants_at_the_bundles_path_is_refused(
    places: tuple[Path, Path, Path], plant: str
) -> None:
    tmp, home, agent = places
    bundle = tmp / "mwc-push-ex.bundle"
    if plant == "symlink-out":
        bundle.symlink_to(agent / "mirror.git")
    elif plant == "directory":
        subprocess.run(["git", "init", "-q", "--bare", str(bundle)], check=True)
    elif plant == "fifo":
        os.mkfifo(bundle)
    else:
        secret = agent / "packed"
        secret.write_bytes(b"the agent's")
        os.link(secret, bundle)
    done = stage(tmp, bundle.name, home / "copy.bundle")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.startswith("mwc-agent stage: ")
    assert not (home / "copy.bundle").exists()


def test_a_plain_file_is_copied_private_and_bounded(places: tuple[Path, Path, Path]) -> None:
    tmp, home, _ = places
    (tmp / "mwc-push-ex.bundle").write_bytes(b"# v2 git bundle\n" + b"x" * 100)
    done = stage(tmp, "mwc-push-ex.bundle", home / "copy.bundle")
    assert done.returncode == 0, done.stderr
    copy = home / "copy.bundle"
    assert copy.read_bytes() == (tmp / "mwc-push-ex.bundle").read_bytes()
    assert copy.stat().st_mode & 0o777 == 0o600
    too_big = stage(tmp, "mwc-push-ex.bundle", home / "second.bundle", max_bytes="64")
    assert too_big.returncode == 1 and "more than the 64" in too_big.stderr
    assert not (home / "second.bundle").exists()
    # Never over a file already there.
    again = stage(tmp, "mwc-push-ex.bundle", copy)
    assert again.returncode == 1 and copy.read_bytes().startswith(b"# v2 git bundle")
