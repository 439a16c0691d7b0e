"""Sandboxes of the test control plane: a directory and local processes per sandbox.

A sandbox's container directories (`/workspace`, and any other mapped prefix) live under its own
directory. Its processes see them at their container paths through bubblewrap (`isolation`) when
that works here; otherwise argv, working directories and environment values are translated on
the way in. Termination kills every process the sandbox started, including those that left its
process groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import secrets
import shutil
import signal
import string
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from modal_proto import api_pb2

from . import isolation
from .processes import LocalProcess

_ALNUM = string.ascii_letters + string.digits
# The marker every sandbox process carries in its environment, so termination finds the ones that
# were reparented away from the sandbox's process tree.
MARKER_ENV = "MODAL_SANDBOX_ID"
# What a container started from an image without a command runs: something that just stays up.
IDLE_ENTRYPOINT = (sys.executable, "-c", "import time\nwhile True: time.sleep(3600)")


@functools.cache
def _path_pattern(prefix: str) -> re.Pattern[str]:
    # The prefix as a path of its own: not the tail of a longer path or word, and followed by a
    # path separator or something that ends a shell word.
    return re.compile(r"(?<![\w./-])" + re.escape(prefix) + r"(?=$|[/\s\"';:)&|<>])")


def v1_id(prefix: str) -> str:
    """An id in the SDK's V1 shape: prefix, dash, 22 alphanumerics."""
    return f"{prefix}-" + "".join(secrets.choice(_ALNUM) for _ in range(22))


def v2_sandbox_id() -> str:
    # Any id that is not the V1 shape routes the SDK to the V2 calls.
    return "sb-" + secrets.token_hex(12)


def v2_task_id() -> str:
    # The SDK recognises tasks of V2 sandboxes by the trailing "V".
    return "ta-" + secrets.token_hex(11) + "V"


def v1_task_id() -> str:
    task_id = v1_id("ta")
    return task_id[:-1] + "0" if task_id.endswith("V") else task_id


@dataclass
class ExecRecord:
    exec_id: str
    process: LocalProcess
    started_at: float = field(default_factory=time.time)
    # The command line as the exec call carried it (what a test checks for leaked values).
    argv: tuple[str, ...] = ()


@dataclass
class SandboxRecord:
    sandbox_id: str
    task_id: str
    version: int
    app_id: str
    name: str
    tags: dict[str, str]
    definition: api_pb2.Sandbox
    env: dict[str, str]
    directory: Path
    mapped_prefixes: tuple[str, ...]
    sandbox_token: str = ""
    # bubblewrap, when it works here: processes then see real container paths.
    bwrap: str | None = None
    created_at: float = field(default_factory=time.time)
    entrypoint: LocalProcess | None = None
    execs: dict[str, ExecRecord] = field(default_factory=dict)
    result: api_pb2.GenericResult | None = None
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    last_activity: float = field(default_factory=time.monotonic)
    # The last V1 stdin write applied (`SandboxStdinWrite` numbers them from 1).
    stdin_index: int = 0
    finished_at: float = 0.0
    # Called once the sandbox has ended and its processes are killed, to take its exit
    # snapshot (when the sandbox was created with it enabled).
    on_exit: Callable[[SandboxRecord], None] | None = None
    # The exit snapshot's image id, or why there is none; both None while none was asked for.
    exit_image_id: str | None = None
    exit_error: str | None = None
    _watchers: list[asyncio.Task[None]] = field(default_factory=list)
    # Its container is still starting: no task yet (see `State.start_delay`).
    starting: bool = False
    # Ended, and no longer listed or found by name (`ControlPlane.forget_ended_sandboxes`): how
    # long Modal keeps listing ended sandboxes is not documented.
    forgotten: bool = False

    # -- container paths ---------------------------------------------------------------------

    def host_path(self, container_path: str) -> str:
        """The host path standing in for `container_path`; paths outside mapped prefixes pass."""
        for prefix in self.mapped_prefixes:
            if container_path == prefix or container_path.startswith(prefix + "/"):
                return str(self.directory / prefix.lstrip("/")) + container_path[len(prefix) :]
        return container_path

    def translate(self, value: str) -> str:
        """Map every container path inside an argv element or env value: a whole path, the value
        of `--opt=/path`, or a path inside a shell script."""
        for prefix in self.mapped_prefixes:
            host = str(self.directory / prefix.lstrip("/"))
            # A replacement template: only backslashes are special in it.
            value = _path_pattern(prefix).sub(host.replace("\\", "\\\\"), value)
        return value

    @property
    def container_workdir(self) -> str:
        return self.definition.workdir or "/workspace"

    @property
    def workdir(self) -> Path:
        return Path(self.host_path(self.container_workdir))

    def process_env(self, extra: Mapping[str, str] = {}) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_")}
        # The image's PATH carries this project's console scripts.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env["HOME"] = isolation.HOME if self.bwrap else str(self.directory / "root")
        given = {**self.env, **extra}
        env.update(given if self.bwrap else {k: self.translate(v) for k, v in given.items()})
        env[MARKER_ENV] = self.sandbox_id
        env["MODAL_TASK_ID"] = self.task_id
        return env

    async def _spawn(
        self, argv: Iterable[str], workdir: str | None, env: Mapping[str, str] = {}
    ) -> LocalProcess:
        """Start a process of this sandbox at container path `workdir` (default: the
        sandbox's), in bubblewrap when it works, else with container paths translated."""
        cwd = workdir or self.container_workdir
        if self.bwrap:
            binds = {p: self.directory / p.lstrip("/") for p in self.mapped_prefixes}
            binds[isolation.HOME] = self.directory / "root"
            wrapped = isolation.bwrap_argv(self.bwrap, binds, cwd, list(argv))
            return await LocalProcess.spawn(wrapped, cwd=self.directory, env=self.process_env(env))
        return await LocalProcess.spawn(
            [self.translate(a) for a in argv],
            cwd=Path(self.host_path(cwd)),
            env=self.process_env(env),
        )

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.result is None

    @property
    def exit_snapshot_enabled(self) -> bool:
        # The SDK sends `experimental_options` as strings in `experimental_options_v2`.
        options = {**dict(self.definition.experimental_options)}
        options.update(dict(self.definition.experimental_options_v2))
        return str(options.get("enable_exit_snapshot", "")).lower() in ("true", "1")

    def prepare(self, snapshot: Path | None) -> None:
        for prefix in self.mapped_prefixes:
            (self.directory / prefix.lstrip("/")).mkdir(parents=True, exist_ok=True)
        (self.directory / "root").mkdir(parents=True, exist_ok=True)
        if snapshot is not None:
            shutil.copytree(snapshot, self.directory, symlinks=True, dirs_exist_ok=True)
            keep_owners(snapshot, self.directory)
        self.workdir.mkdir(parents=True, exist_ok=True)

    async def start(self) -> None:
        argv = list(self.definition.entrypoint_args) or list(IDLE_ENTRYPOINT)
        self.entrypoint = await self._spawn(argv, None)
        self._watchers.append(asyncio.create_task(self._watch_entrypoint()))
        if self.definition.timeout_secs:
            self._watchers.append(asyncio.create_task(self._watch_timeout()))
        if self.definition.idle_timeout_secs:
            self._watchers.append(asyncio.create_task(self._watch_idle()))

    async def _watch_entrypoint(self) -> None:
        assert self.entrypoint is not None
        code = await self.entrypoint.wait()
        status = (
            api_pb2.GenericResult.GENERIC_STATUS_SUCCESS
            if code == 0
            else api_pb2.GenericResult.GENERIC_STATUS_FAILURE
        )
        self.finish(
            api_pb2.GenericResult(status=status, exitcode=code if code >= 0 else 128 - code)
        )

    async def _watch_timeout(self) -> None:
        await asyncio.sleep(self.definition.timeout_secs)
        self.finish(api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_TIMEOUT))

    async def _watch_idle(self) -> None:
        # Idle means: no exec running and no stdin or exec traffic for `idle_timeout_secs`.
        limit = float(self.definition.idle_timeout_secs)
        while self.running:
            if any(e.process.returncode is None for e in self.execs.values()):
                self.touch()
            remaining = self.last_activity + limit - time.monotonic()
            if remaining <= 0:
                self.finish(
                    api_pb2.GenericResult(
                        status=api_pb2.GenericResult.GENERIC_STATUS_IDLE_TIMEOUT,
                        exception="idle timeout",
                    )
                )
                return
            await asyncio.sleep(min(remaining, 0.2))

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def finish(self, result: api_pb2.GenericResult, *, exit_snapshot: bool = True) -> None:
        """Record the sandbox's result (the first one wins) and kill everything it runs; the
        first end takes the exit snapshot where it is enabled (not at the plane's shutdown)."""
        first = self.result is None
        if first:
            self.result = result
            self.finished_at = time.time()
        self.kill_all()
        if first and exit_snapshot and self.on_exit is not None and self.exit_snapshot_enabled:
            self.on_exit(self)
        self.finished.set()
        current = asyncio.current_task()
        for task in self._watchers:
            if task is not current:
                task.cancel()

    def kill_all(self) -> None:
        roots = [p for p in self.all_processes() if p.pid is not None]
        pids = _descendants({p.pid for p in roots if p.pid}) | _marked(self.sandbox_id)
        for process in roots:
            process.signal_group(signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def all_processes(self) -> Iterable[LocalProcess]:
        if self.entrypoint is not None:
            yield self.entrypoint
        for record in self.execs.values():
            yield record.process

    # -- exec --------------------------------------------------------------------------------

    async def start_exec(
        self,
        exec_id: str,
        argv: Iterable[str],
        *,
        workdir: str | None,
        env: Mapping[str, str],
        timeout_secs: int | None,
    ) -> ExecRecord:
        argv = tuple(argv)
        process = await self._spawn(argv, workdir, env)
        record = ExecRecord(exec_id, process, argv=argv)
        self.execs[exec_id] = record
        self.touch()
        if timeout_secs:
            self._watchers.append(asyncio.create_task(self._exec_timeout(process, timeout_secs)))
        return record

    async def _exec_timeout(self, process: LocalProcess, seconds: int) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(process.wait(), seconds)
            return
        process.signal_group(signal.SIGKILL)


def copy_filesystem(source: Path, target: Path) -> None:
    """Copy a sandbox's directory as a filesystem snapshot: regular files, directories and
    symlinks; sockets and pipes belong to processes and are left out."""

    def special(directory: str, names: list[str]) -> list[str]:
        skipped = []
        for name in names:
            path = Path(directory) / name
            if not (path.is_symlink() or path.is_dir() or path.is_file()):
                skipped.append(name)
        return skipped

    shutil.copytree(source, target, symlinks=True, ignore=special)
    keep_owners(source, target)


def keep_owners(source: Path, target: Path) -> None:
    """Gives each copied entry its source's owner, as Modal's snapshots keep them (a sandbox's
    commands run as a user of their own); only root may, and only root needs to."""
    if os.geteuid() != 0:
        return
    for directory, dirs, files in os.walk(source):
        for name in ["", *dirs, *files]:
            src = os.path.join(directory, name)
            dst = target / os.path.relpath(src, source)
            with contextlib.suppress(OSError):
                st = os.lstat(src)
                os.lchown(dst, st.st_uid, st.st_gid)


def _descendants(roots: set[int]) -> set[int]:
    """Every live process below `roots`, read from /proc at this instant."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may contain spaces and parentheses; fields resume after the last ")".
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    pending = list(roots)
    while pending:
        pid = pending.pop()
        for child in children.get(pid, []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _marked(sandbox_id: str) -> set[int]:
    """Processes whose environment names this sandbox (those reparented out of its tree)."""
    needle = f"{MARKER_ENV}={sandbox_id}".encode()
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.add(int(entry.name))
    return found
