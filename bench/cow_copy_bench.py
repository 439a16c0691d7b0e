"""What a copy-on-write data root changes for snapshots: the core's copy (`_core.copy_tree`, what
a snapshot, a restore and a fork make) against `cp -a --reflink=auto`, of one tree, on ext4 and
on btrfs, each a loop-mounted image of its own, with the space each copy took on the host.

    python bench/cow_copy_bench.py [--size 1G] [--files 1000] [--rounds 3]

Needs root and `mkfs.btrfs` (Debian's btrfs-progs). On btrfs (and XFS with reflinks) a copy
within one file system shares the blocks: it takes no space and little time. A workspace with a
disk of its own (the local driver as root) lives on an ext4 image of its own, so its copies to and
from the data root cross file systems and share nothing, whatever the data root is; the rows
below are what a workspace without one (the gateway as a user) gets.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from agent_stack import cpu_model
from modal_workspace_core import _core
from snapshot_bench import parse_size


@contextlib.contextmanager
def file_system(kind: str, where: Path, size: int) -> Iterator[Path]:
    image, mount = where / f"{kind}.img", where / kind
    with image.open("wb") as f:
        f.truncate(size)
    subprocess.run([f"mkfs.{kind}", "-q", str(image)], check=True, capture_output=True)
    mount.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def used(path: Path) -> int:
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def measure(root: Path, size: int, files: int, rounds: int) -> dict[str, tuple[float, int]]:
    tree = root / "tree"
    for i in range(files):
        directory = tree / f"d{i % 10}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{i}.bin").write_bytes(os.urandom(size // files))
    os.sync()
    times: dict[str, list[float]] = {"cp": [], "core": []}
    space: dict[str, int] = {}
    for _ in range(rounds):
        for name in ("cp", "core"):
            target = root / f"copy-{name}"
            target.mkdir()
            before = used(root)
            started = time.perf_counter()
            if name == "cp":
                subprocess.run(["cp", "-a", "--reflink=auto", f"{tree}/.", str(target)], check=True)
            else:
                _core.copy_tree(
                    str(tree), str(target), display="/t", max_bytes=1 << 62, max_entries=1 << 30
                )
            os.sync()
            times[name].append(time.perf_counter() - started)
            space[name] = used(root) - before
            shutil.rmtree(target)
            os.sync()
    return {name: (statistics.median(times[name]), space[name]) for name in times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1G")
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    size = parse_size(args.size)
    if os.geteuid() != 0 or shutil.which("mkfs.btrfs") is None:
        raise SystemExit("needs root and mkfs.btrfs (apt-get install btrfs-progs)")
    print(f"## Copies on a copy-on-write data root — {os.cpu_count()} cores, {cpu_model()}")
    print()
    head = f"{args.size} in {args.files} files ({args.rounds} rounds)"
    print(f"| {head} | median s | ÷ cp -a | MiB taken |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="mwc-cowbench-") as tmp:
        for kind in ("ext4", "btrfs"):
            with file_system(kind, Path(tmp), size * 3 + (512 << 20)) as root:
                rows = measure(root, size, args.files, args.rounds)
            base = rows["cp"][0]
            for name, label in (("cp", "`cp -a --reflink=auto`"), ("core", "`_core.copy_tree`")):
                seconds, taken = rows[name]
                print(
                    f"| {kind}: {label} | {seconds:.2f} | {seconds / base:.2f}x | {taken >> 20} |"
                )


if __name__ == "__main__":
    main()
