"""A hostile tenant for the security suite: a process inside a workspace that keeps reshaping
its tree while the host works on it, and the checks that nothing of the host leaked.

The tenant (`TENANT`, run by `python3` inside the sandbox) lays out directories `t/d0…d5`, each
holding a large file (`aaa-big`, opened first by any copy) and files named like those of the
host's canary directory; then, on inotify events in those directories (a copy opening the large
file) and on a timer, it swaps a directory for a symlink to the canary directory (a host path:
the symlink resolves there only for a host process that follows it) and back. Meanwhile it keeps
FIFOs, a socket, hard links and a growing file, and writes a forged line into every output
descriptor of its own uid's processes it can open.

A test starts it with `start_tenant`, runs a host-side operation, and checks with
`assert_no_leak` that the canary is nowhere under the data root (where every workspace, snapshot
and fork lives) and that the canary directory is unchanged. A new operation that touches
workspace data gets a case in `test_host_side_operations.py` under this tenant.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CANARY = "HOST-CANARY-7c2d91"
# The names in the canary directory; the tenant's directories hold files of the same names.
CANARY_FILES = ("secret", "channel.key")
TENANT_PATH = "t"
# A line the tenant writes into every output it can reach.
FORGED = "FORGED-BY-TENANT"

TENANT = r"""
import ctypes, os, socket, sys, threading, time

# React to an inotify event within a fraction of a millisecond, not a GIL switch interval.
sys.setswitchinterval(0.0002)

host = sys.argv[1]
names = sys.argv[2].split(",")
forged = sys.argv[3].encode() + b"\n"
root = os.path.abspath("t")
os.makedirs(root, exist_ok=True)
os.chdir(root)
dirs = [f"d{i}" for i in range(6)]
for d in dirs:
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/aaa-big", "wb") as f:
        # Large enough that a copy is still reading it when the directory is swapped.
        f.write(os.urandom(1 << 20) * 16)
    for name in names:
        with open(f"{d}/{name}", "w") as f:
            f.write("workspace data\n")
for special in ("fifo", "fifo2"):
    try:
        os.mkfifo(special)
    except FileExistsError:
        pass
sock = socket.socket(socket.AF_UNIX)
try:
    sock.bind("sock")
except OSError:
    pass
with open("linked", "w") as f:
    f.write("linked\n")
for i in range(3):
    try:
        os.link("linked", f"link{i}")
    except FileExistsError:
        pass
try:
    os.symlink(host, "host-link")
    os.symlink(host + "/" + names[0], "host-file-link")
except FileExistsError:
    pass
lock = threading.Lock()

def swap(d, hold):
    with lock:
        aside = f".aside-{d}"
        try:
            os.rename(d, aside)
        except OSError:
            return
        try:
            os.symlink(host, d)
            time.sleep(hold)
            os.unlink(d)
        except OSError:
            pass
        finally:
            os.rename(aside, d)

libc = ctypes.CDLL(None, use_errno=True)
IN_OPEN, IN_ACCESS = 0x20, 0x01
fd = libc.inotify_init()
watches = {}
for d in dirs:
    wd = libc.inotify_add_watch(fd, os.path.join(root, d).encode(), IN_OPEN | IN_ACCESS)
    watches[wd] = d

def on_events():
    while True:
        buf = os.read(fd, 65536)
        at = 0
        while at + 16 <= len(buf):
            wd = int.from_bytes(buf[at:at + 4], "little", signed=True)
            length = int.from_bytes(buf[at + 12:at + 16], "little")
            at += 16 + length
            d = watches.get(wd)
            if d is not None:
                swap(d, 0.05)

def on_timer():
    i = 0
    while True:
        swap(dirs[i % len(dirs)], 0.002)
        i += 1
        time.sleep(0.05)

def grow():
    with open("growing.log", "ab") as f:
        while True:
            f.write(b"x" * 65536)
            f.flush()
            if f.tell() > 64 << 20:
                f.truncate(0)
            time.sleep(0.001)

def forge():
    me = os.getpid()
    while True:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == me:
                continue
            for n in ("1", "2"):
                try:
                    out = os.open(f"/proc/{pid}/fd/{n}", os.O_WRONLY | os.O_NONBLOCK)
                except OSError:
                    continue
                try:
                    os.write(out, forged)
                except OSError:
                    pass
                finally:
                    os.close(out)
        time.sleep(0.05)

for job in (on_events, on_timer, grow, forge):
    threading.Thread(target=job, daemon=True).start()
with open("ready", "w") as f:
    f.write("ready\n")
while True:
    time.sleep(3600)
"""


@dataclass(frozen=True)
class Canary:
    """A host directory no workspace may see, holding root-only files with the canary."""

    directory: Path
    # What it held when made: `assert_no_leak` checks that nothing changed it.
    made_with: dict[str, tuple[int, int, bytes]]

    @classmethod
    def make(cls, where: Path) -> Canary:
        directory = where / "host-canary"
        directory.mkdir(mode=0o700)
        for name in CANARY_FILES:
            path = directory / name
            path.write_text(f"{CANARY} {name}\n")
            path.chmod(0o600)
        return cls(directory, _contents(directory))

    def unchanged(self) -> bool:
        return _contents(self.directory) == self.made_with


def _contents(directory: Path) -> dict[str, tuple[int, int, bytes]]:
    return {
        p.name: (p.stat().st_mode, p.stat().st_size, p.read_bytes())
        for p in sorted(directory.iterdir())
    }


def launch_command(canary: Canary) -> str:
    """The shell command that starts the tenant (written as `.tenant.py` in the workspace's root)
    in the background and prints `tenant-ready` once it is reshaping its tree."""
    names = ",".join(CANARY_FILES)
    return (
        f"(setsid python3 .tenant.py {canary.directory} {names} {FORGED} "
        ">/dev/null 2>&1 </dev/null &); "
        "for i in $(seq 600); do [ -f t/ready ] && break; sleep 0.1; done; "
        "test -f t/ready && echo tenant-ready"
    )


async def start_tenant(ws: Any, canary: Canary) -> None:
    """Starts the tenant in a workspace (`ws`, a Python API `Workspace`) and returns once it is
    reshaping its tree."""
    await ws.file_write(".tenant.py", TENANT)
    done = await ws.exec(launch_command(canary))
    assert "tenant-ready" in done.stdout, (done.stdout, done.stderr)


def files_holding(root: Path, needle: bytes) -> list[Path]:
    """Every regular file under `root` whose bytes hold `needle`, found as root by directory fds
    (`os.fwalk` never follows a link, and each file is opened `O_NOFOLLOW` beneath its
    directory's fd): the tenant may be swapping links in while this looks, and a scan that
    followed one would find the host's own canary."""
    found: list[Path] = []
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for dirpath, _dirs, filenames, dir_fd in os.fwalk(root, follow_symlinks=False):
        for name in filenames:
            try:
                fd = os.open(name, flags, dir_fd=dir_fd)
            except OSError:
                continue  # a link, a FIFO's peer, or gone
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    continue
                with os.fdopen(os.dup(fd), "rb") as f:
                    if needle in f.read():
                        found.append(Path(dirpath, name))
            except OSError:
                continue
            finally:
                os.close(fd)
    return found


def assert_no_leak(data_root: Path, canary: Canary) -> None:
    leaked = files_holding(data_root, CANARY.encode())
    assert not leaked, f"the host's canary reached workspace data: {leaked}"
    assert canary.unchanged(), "the host's canary directory changed"
