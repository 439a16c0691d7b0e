"""Starts a bubblewrap sandbox in steps the gateway controls: bwrap reports its child, the
gateway maps the user namespace's ids (root only), bounds its inotify use, attaches user-mode
networking to its network namespace (with the watcher that ends it with the sandbox, `pasta`),
and only then lets the command run.

Nothing a workspace controls takes part: bwrap runs with a fixed environment, and the command's
configuration (its environment, the workspace's secrets) reaches it on stdin, read inside.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..command_user import AGENT_GIT_UID, COMMAND_UID
from . import pasta
from .bubblewrap import LaunchFds, SandboxLayout, bwrap_argv
from .daemon import detached_popen

# Inside the sandbox: the uid (and gid) of the workspace's commands, and of the agent's own git
# steps. Each maps to a host uid of the workspace's own when the gateway runs as root.
COMMAND_ID = COMMAND_UID
AGENT_GIT_ID = AGENT_GIT_UID
# Per user namespace, so one workspace cannot take the inotify instances or watches every other
# workspace (and the gateway's user) needs.
# (Every user namespace's use also counts against its owner's host limit, root's for all of
# them: the host's fs.inotify.max_user_instances bounds how many workspaces may use theirs
# fully at once.)
INOTIFY_LIMITS = {"max_inotify_instances": 32, "max_inotify_watches": 65536}
_STEP_TIMEOUT = 30.0


class LaunchError(RuntimeError):
    """A step of the start failed; the message says which and why."""


@dataclass(frozen=True)
class HostIds:
    """The host uids (and gids, the same numbers) of one workspace, when the gateway is root."""

    commands: int
    agent_git: int

    def id_map(self) -> str:
        # Root inside is the gateway's root (the agent, with a few namespaced capabilities);
        # the workspace's users map to its own host uids, which own nothing else on the host.
        return f"0 0 1\n{COMMAND_ID} {self.commands} 1\n{AGENT_GIT_ID} {self.agent_git} 1\n"


@dataclass(frozen=True)
class Network:
    """User-mode networking with pasta: the internet through the host's sockets, the host's
    loopback only on `host_ports` (an operator's allowlist; none by default)."""

    pasta: str
    # Where pasta writes its pid (`pasta.pid_file`, out of every sandbox's sight): pasta does
    # not end with the sandbox it serves by itself, and this is how its watcher and a later
    # gateway know it (`pasta`).
    pid_file: Path
    host_ports: tuple[int, ...] = ()

    def argv(self, pid: int, *, as_root: bool) -> list[str]:
        ports = ",".join(str(p) for p in self.host_ports) or "none"
        argv = [self.pasta, "--config-net", "--quiet", "--no-map-gw"]
        # Nothing from the host into the namespace, and from the namespace to the host's
        # loopback only the allowlisted TCP ports.
        argv += ["-t", "none", "-u", "none", "-T", ports, "-U", "none"]
        argv += ["--netns", f"/proc/{pid}/ns/net", "--userns", f"/proc/{pid}/ns/user"]
        if as_root:
            # pasta gives up root for `nobody` by default, who may not enter this namespace.
            argv += ["--runas", "0:0"]
        return [*argv, "--pid", str(self.pid_file)]


def launch(
    build_argv: Callable[[LaunchFds], Sequence[str]],
    *,
    stdin: int,
    output: int,
    env: Mapping[str, str],
    cwd: Path,
    ids: HostIds | None,
    network: Network | None,
) -> subprocess.Popen[bytes]:
    """Starts the sandbox and returns it running the command, or raises LaunchError with the
    sandbox already ended."""
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    userns_r, userns_w = os.pipe() if ids is not None else (-1, -1)
    fds = LaunchFds(info_w, block_r, userns_r if ids is not None else None)
    argv = list(build_argv(fds))
    # bwrap reads its options from a file (`--args`), so the sandbox's init, whose command line
    # every process inside can read, shows no host paths (the data root's); the command after
    # `--` stays on the command line, where bwrap takes it from.
    split = argv.index("--")
    args = os.memfd_create("mwc-bwrap-args", 0)
    os.write(args, b"".join(os.fsencode(a) + b"\0" for a in argv[1:split]))
    os.lseek(args, 0, os.SEEK_SET)
    child_fds = [fd for fd in (info_w, block_r, userns_r, args) if fd >= 0]
    try:
        proc = detached_popen(
            [argv[0], "--args", str(args), *argv[split:]],
            env,
            cwd=cwd,
            stdin=stdin,
            output=output,
            pass_fds=child_fds,
        )
    finally:
        for fd in child_fds:
            os.close(fd)
    try:
        try:
            pid = _child_pid(info_r)
            if ids is not None:
                _map_ids(pid, ids.id_map())
                os.write(userns_w, b"1")
                _bound_inotify(pid)
            if network is not None:
                _wait_for_loopback(pid)
                _attach(network, pid, env, output)
            os.write(block_w, b"1")
        finally:
            for fd in (info_r, block_w, userns_w):
                if fd >= 0:
                    os.close(fd)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if network is not None:
            pasta.end(network.pid_file)
        raise
    return proc


def _child_pid(info_r: int) -> int:
    data = b""
    deadline = time.monotonic() + _STEP_TIMEOUT
    while True:
        try:
            return int(json.loads(data)["child-pid"])
        except (ValueError, KeyError, TypeError):
            pass
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([info_r], [], [], left)[0]:
            raise LaunchError("bubblewrap did not report its sandbox in time")
        chunk = os.read(info_r, 4096)
        if not chunk:
            raise LaunchError("bubblewrap ended before its sandbox started")
        data += chunk


def _map_ids(pid: int, id_map: str) -> None:
    try:
        Path(f"/proc/{pid}/uid_map").write_text(id_map)
        Path(f"/proc/{pid}/gid_map").write_text(id_map)
    except OSError as err:
        raise LaunchError(f"cannot map the sandbox's user ids: {err}") from err


def _bound_inotify(pid: int) -> None:
    # The limits of a user namespace are written from inside it (as its root, which the
    # gateway is there); nsenter enters only that namespace, so /proc/sys/user is its.
    script = "".join(
        f"echo {value} > /proc/sys/user/{name}\n" for name, value in INOTIFY_LIMITS.items()
    )
    done = subprocess.run(
        ["nsenter", f"--user=/proc/{pid}/ns/user", "--", "/bin/sh", "-c", script],
        capture_output=True,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        timeout=_STEP_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip()
        raise LaunchError(f"cannot bound the sandbox's inotify use: {why}")


def _wait_for_loopback(pid: int) -> None:
    # bwrap brings up the namespace's loopback once the ids are mapped; pasta configures the
    # namespace after it (the other order makes bwrap's own setup fail).
    deadline = time.monotonic() + _STEP_TIMEOUT
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            # The routing table of the namespace holds 127.0.0.1 once bwrap has set it on lo.
            if "127.0.0.1" in Path(f"/proc/{pid}/net/fib_trie").read_text():
                return
        time.sleep(0.002)
    raise LaunchError("the sandbox's loopback did not come up")


def _attach(network: Network, pid: int, env: Mapping[str, str], output: int) -> None:
    # pasta runs in the background for the sandbox's life, and so does its watcher, which ends
    # it when the sandbox ends; both carry the workspace's marker (in `env`), so stopping the
    # workspace ends them too. The init is held by bwrap until the command may run: the pidfd
    # opened now is of that very process.
    argv = network.argv(pid, as_root=os.geteuid() == 0)
    try:
        sandbox = os.pidfd_open(pid)
    except OSError as err:
        raise LaunchError(f"cannot watch the sandbox: {err}") from err
    try:
        try:
            done = subprocess.run(
                argv, capture_output=True, env=dict(env), timeout=_STEP_TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise LaunchError(f"cannot start pasta for the workspace's network: {err}") from err
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip()
            raise LaunchError(f"pasta could not attach the workspace's network: {why}")
        try:
            pasta.watch(sandbox, pid, network.pid_file, env, output)
        except OSError as err:
            raise LaunchError(f"cannot tie pasta to the sandbox's life: {err}") from err
    finally:
        os.close(sandbox)


@functools.cache
def network_problem(bwrap: str, pasta_path: str) -> str | None:
    """Why pasta cannot give a sandbox its network here (None when it can): tried once per
    process on a sandbox that runs `true` (an unprivileged user may lack /dev/net/tun)."""
    with tempfile.TemporaryDirectory(prefix="mwc-net-probe-") as tmp:
        workspace, home, state, sock = (
            Path(tmp, n) for n in ("workspace", "home", "state", "sock")
        )
        for d in (workspace, home, state, sock):
            d.mkdir()
        layout = SandboxLayout(workspace, home, state, sock)
        with open(os.devnull, "rb") as null, tempfile.TemporaryFile() as out:
            pid_file = Path(tmp, "pasta.pid")
            try:
                proc = launch(
                    lambda fds: bwrap_argv(bwrap, layout, ["/bin/true"], fds=fds),
                    stdin=null.fileno(),
                    output=out.fileno(),
                    env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                    cwd=Path(tmp),
                    ids=None,
                    network=Network(pasta_path, pid_file),
                )
            except LaunchError as err:
                # pasta's complaints about syslog (absent in containers) say nothing useful.
                lines = str(err).splitlines()
                return " ".join(line for line in lines if "syslog" not in line) or str(err)
            finally:
                pasta.end(pid_file)
            proc.wait(timeout=_STEP_TIMEOUT)
    return None
