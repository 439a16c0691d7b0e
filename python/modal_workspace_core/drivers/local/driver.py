"""The local driver (the embedded default): workspaces on this machine, each a directory under a
data root with its own agent daemon, isolated with bubblewrap where bubblewrap works.

Reading a workspace never contacts its daemon; `connect` restarts a daemon that has died, and a
restarted server finds every workspace, its daemon and its exec logs again. Snapshots, resume,
fork, suspend and notes are `lifecycle`'s, a mixin of this driver.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import functools
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ... import policy
from ..._core import CHANNEL_KEEPALIVE_SECONDS
from ...channel.client import AgentClient, AgentError
from ...channel.relay import open_relay
from ...config import DEFAULT_DISK_MB, ISOLATION_ENV, IsolationMode
from ...errors import (
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    UpstreamError,
    core_refusal,
)
from ...policy import WORKSPACE_ROOT
from ...shared_store import SharedStore, SqliteStore
from ..base import (
    Lineage,
    WorkspaceRecord,
    WorkspaceSpec,
    utc_now,
)
from ..command_user import RUN_AS_ROOT
from . import bubblewrap, bubblewrap_launch, daemon, disk, pasta, uids, volumes
from .disk import DiskError, WorkspaceDisk
from .launch import DEFAULT_LIMITS, WORKSPACE_ID_ENV, AgentLauncher
from .lifecycle import LocalLifecycle
from .record import as_record, check_live, live_state, process_marker
from .snapshots import SnapshotBudget, SnapshotStore
from .store import WorkspaceDir, WorkspaceGone, remove_leftovers, remove_tree
from .workspace_records import WorkspaceRecords, is_workspace_id

# WORKSPACE_ID_ENV: the variable that marks a workspace's processes (by which they are found).
__all__ = ["INSTALL_HINT", "TURNED_OFF", "WORKSPACE_ID_ENV", "IsolationMode", "LocalDriver"]

TURNED_OFF = "isolation turned off"
# What a machine without working bubblewrap needs (the README's Isolation section says more).
INSTALL_HINT = (
    "apt-get install bubblewrap passt (Debian/Ubuntu); the kernel must allow unprivileged "
    "user namespaces"
)


log = logging.getLogger(__name__)
_warned: set[str] = set()


class LocalDriver(LocalLifecycle):
    """Workspaces as directories under `data_root`, each served by a detached agent daemon."""

    name = "local"
    keeps_snapshots = False
    ends_idle_workspaces = False
    # A workspace made without bubblewrap runs its commands in its host directory, and reports
    # that as its root (see `path_view`); bubblewrap's show `/workspace`.
    roots_vary = True

    def __init__(
        self,
        data_root: str | os.PathLike[str],
        *,
        isolation: IsolationMode = "auto",
        agent_argv: list[str] | None = None,
        start_timeout: float = 60.0,
        host_ports: tuple[int, ...] = (),
        limits: dict[str, int] | None = None,
        disk_mb: int = DEFAULT_DISK_MB,
        keepalive_seconds: int = CHANNEL_KEEPALIVE_SECONDS,
        snapshot_budget: SnapshotBudget | None = None,
    ) -> None:
        """`data_root` holds every workspace (`Settings.data_root`).
        `isolation` (`Settings.isolation`): `auto` uses bubblewrap when it works here and warns
        once when it does not; `bwrap` requires it; `none` never isolates. `host_ports` are the
        host's loopback ports workspaces may reach, `disk_mb` each workspace's own disk (where
        one can be mounted). `agent_argv` is the command that runs `mwc-agent` (its subcommand
        follows). `snapshot_budget` bounds what snapshots hold on the host."""
        # How often a channel's Hello promises the agent a frame (`Settings`).
        self.keepalive_seconds = keepalive_seconds
        self.data_root = Path(data_root).expanduser().resolve()
        self.data_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        remove_leftovers(self.data_root)
        # What a crash left running for sandboxes that have ended since (the watchers that end
        # it went with them); the sweep does it again while the gateway serves.
        self._end_strays()
        self.snapshots = SnapshotStore(self.data_root, snapshot_budget)
        given = Path(data_root).expanduser()
        self.default_disk_mb = disk_mb
        self.snapshots.prune_leftovers()
        mode = isolation
        if mode not in ("auto", "bwrap", "none"):
            raise InvalidArgumentError(
                "invalid_argument",
                f"isolation ({ISOLATION_ENV}) must be auto, bwrap or none, not {mode[:32]!r}",
                field="isolation",
            )
        if mode == "none":
            self.isolation = bubblewrap.Isolation(False, None, TURNED_OFF)
        else:
            self.isolation = bubblewrap.probe()
        self.network_problem = (
            "" if self.isolation.pasta else "pasta is not installed (apt-get install passt)"
        )
        store = SqliteStore(self.data_root / "shared.sqlite3")
        self.shared_store: SharedStore = store
        # Each workspace's record, in the same store (never a file its commands could write).
        self.records = WorkspaceRecords(store)
        self._settle_records()
        # An unisolated workspace's root is its host directory, which its answers name.
        self.hidden_paths: tuple[str, ...] = (
            tuple({str(self.data_root), str(given.absolute())}) if self.isolation.enabled else ()
        )
        if mode == "bwrap" and not self.isolation.enabled:
            raise UpstreamError("upstream", f"isolation=bwrap, but {self.isolation.reason}")
        if not self.isolation.enabled and self.isolation.reason not in _warned:
            _warned.add(self.isolation.reason)
            log.warning(
                "workspaces run UNISOLATED (%s): their commands can read and change all of "
                "this user's files and reach the network",
                self.isolation.reason,
            )
        if self.isolation.enabled and self.isolation.bwrap and self.isolation.pasta:
            problem = bubblewrap_launch.network_problem(self.isolation.bwrap, self.isolation.pasta)
            if problem is not None:
                # Workspaces that need the network are refused, saying why.
                self.isolation = dataclasses.replace(self.isolation, pasta=None)
                self.network_problem = problem
        # The agent runs from this interpreter's environment, ignoring PYTHON* variables a
        # workspace's env may set for its own commands.
        self.agent_argv = agent_argv or [sys.executable, "-I", "-m", "modal_workspace_core.agent"]
        self.start_timeout = start_timeout
        # The host's loopback ports workspaces may reach (`MODAL_WORKSPACE_HOST_PORTS`): none
        # unless the operator lists them, so the gateway and local services stay out of reach.
        self.host_ports = host_ports
        self.limits = dict(DEFAULT_LIMITS if limits is None else limits)
        # A disk of its own per workspace (MODAL_WORKSPACE_DISK_MB), where the gateway can
        # mount one: isolated, as root.
        self.disk_mb: int | None = None
        self.disk_reason = disk.available() if self.isolation.enabled else "unisolated"
        if self.disk_reason is None:
            self.disk_mb = disk_mb
        # Secret values live only in memory and in the daemon's environment, never on disk: a
        # daemon restarted by a later server process starts without them.
        self._secret_env: dict[str, dict[str, str]] = {}
        self._socket_paths = daemon.SocketPaths()

    def describe_isolation(self) -> builtins.list[str]:
        """The banner's lines on what contains this driver's commands."""
        if not self.isolation.enabled:
            line = (
                f"  isolation:      NONE ({self.isolation.reason}): commands run as this user "
                "and can read and change its files"
            )
            if self.isolation.reason == TURNED_OFF:
                fix = f"set {ISOLATION_ENV}=auto (or unset it)"
            else:
                # Missing or unusable: what a new user needs to hear is what to do about it.
                fix = INSTALL_HINT
            return [line, f"                  to isolate them: {fix}"]
        user = (
            "a uid of its own per workspace"
            if uids.enabled()
            else "your uid (run as root for a uid per workspace)"
        )
        ports = ",".join(map(str, self.host_ports)) or "none"
        network = (
            f"own namespace through pasta; host loopback ports: {ports}"
            if self.isolation.pasta
            else f"none: {self.network_problem}; only block_network workspaces can be made"
        )
        disk = (
            f"{self.disk_mb} MiB of its own per workspace"
            if self.disk_mb is not None
            else f"not bounded ({self.disk_reason})"
        )
        return [
            f"  isolation:      bubblewrap; commands as {user}; disk: {disk}",
            f"  network:        {network}",
            "  limits:         rlimits per command (no cgroups): "
            + ", ".join(f"{k}={v}" for k, v in sorted(self.limits.items())),
        ]

    def refuse_exposed(self, private_files: Iterable[Path]) -> None:
        """Refuses to serve when a sandbox would see one of the operator's secret files (a
        token or secrets file under the system or the Python environment mounted inside)."""
        if not self.isolation.enabled:
            return
        for path in private_files:
            tree = bubblewrap.exposed_by(path)
            if tree is not None:
                raise InvalidArgumentError(
                    "invalid_argument",
                    f"{path} lies under {tree}, which every workspace sees read-only: move it "
                    "out of the system and Python environment directories",
                    field="private_files",
                )

    # --- the contract -----------------------------------------------------------------------

    async def create(self, workspace_id: str, spec: WorkspaceSpec) -> WorkspaceRecord:
        return await self._create(workspace_id, spec)

    async def _create(
        self,
        workspace_id: str,
        spec: WorkspaceSpec,
        *,
        env: dict[str, str] | None = None,
        lineage: Lineage | None = None,
        fill: Callable[[WorkspaceDir, dict[str, Any]], None] | None = None,
    ) -> WorkspaceRecord:
        ws = self._dir(workspace_id)
        _check_tags(spec.tags)
        _check_env(spec.env, "env")
        _check_env(spec.secret_env, "secret_env")
        if spec.block_network and not self.isolation.enabled:
            raise InvalidArgumentError(
                "invalid_argument",
                "block_network needs bubblewrap isolation, which this server does not have "
                f"({self.isolation.reason})",
                field="block_network",
            )
        _check_resources(spec.resources)
        mounts = volumes.check_request(
            spec.resources.get("volumes"),
            isolated=self.isolation.enabled,
            why_not=self.isolation.reason,
            sandbox_paths=bubblewrap.python_environment(),
        )
        isolated = self.isolation.enabled
        meta: dict[str, Any] = {
            "workspace_id": workspace_id,
            "driver": self.name,
            "root": WORKSPACE_ROOT if isolated else str(ws.workspace),
            "created_at": datetime.now(UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "tags": dict(spec.tags),
            "state": "running",
            "started_at": utc_now(),
            "resources": {**spec.resources, **({"volumes": mounts} if mounts else {})},
            "block_network": spec.block_network,
            # The driver's own part of the record: how to start the daemon again.
            "local": {"isolated": isolated, "env": {**(env or {}), **spec.env}},
        }
        if lineage is not None:
            meta["lineage"] = lineage.model_dump()
        self._secret_env[workspace_id] = dict(spec.secret_env)
        try:
            await asyncio.to_thread(self._create_sync, ws, meta, fill)
        except BaseException:
            self._secret_env.pop(workspace_id, None)
            raise
        return as_record(meta, "running")

    async def get(self, workspace_id: str) -> WorkspaceRecord:
        ws = self._dir(workspace_id)
        return await asyncio.to_thread(self._get_sync, ws)

    async def list(self) -> list[WorkspaceRecord]:
        return await asyncio.to_thread(self._list_sync)

    async def set_tags(self, workspace_id: str, tags: dict[str, str]) -> WorkspaceRecord:
        ws = self._dir(workspace_id)
        _check_tags(tags)
        return await asyncio.to_thread(self._set_tags_sync, ws, dict(tags))

    async def connect(self, workspace_id: str) -> AgentClient:
        ws = self._dir(workspace_id)
        check_live(await asyncio.to_thread(self._meta, ws))
        # A path that stays valid: the client reconnects by it after a lost connection.
        path = self._socket_paths.get(ws.socket)
        check = functools.partial(daemon.check_peer, ws.pid_file)
        key = await asyncio.to_thread(ws.channel_key)
        with contextlib.suppress(OSError, AgentError):
            return await AgentClient.connect_unix(
                path, check=check, key=key, keepalive_seconds=self.keepalive_seconds
            )
        # Dead, or alive and not answering: (re)start it, once, under the workspace's lock.
        await asyncio.to_thread(self._ensure_daemon, ws)
        key = await asyncio.to_thread(ws.channel_key)
        try:
            return await AgentClient.connect_unix(
                path, check=check, key=key, keepalive_seconds=self.keepalive_seconds
            )
        except (OSError, AgentError) as err:
            raise UpstreamError(
                "upstream", f"cannot reach the agent of workspace {workspace_id}: {err}"
            ) from err

    async def open_port(
        self, workspace_id: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A byte stream to `port` on the workspace's loopback, relayed by its agent from inside
        the workspace (`channel.relay`): a preview's connection. The agent must be running
        (`connect` starts it). Raises AgentError (`unavailable`: nothing listens there)."""
        ws = self._dir(workspace_id)
        check_live(await asyncio.to_thread(self._meta, ws))
        check = functools.partial(daemon.check_peer, ws.pid_file)
        key = await asyncio.to_thread(ws.channel_key)
        try:
            return await open_relay(self._socket_paths.get(ws.socket), port, check=check, key=key)
        except OSError as err:
            raise UpstreamError(
                "upstream", f"cannot reach the agent of workspace {workspace_id}: {err}"
            ) from err

    async def revive(self, workspace_id: str) -> bool:
        """Restarts the agent when it is stopped (SIGSTOP, a tracer): it would never answer
        again. A busy agent is left alone. True when it was restarted."""
        ws = self._dir(workspace_id)
        return await asyncio.to_thread(self._revive_sync, ws)

    def _revive_sync(self, ws: WorkspaceDir) -> bool:
        isolated = bool(self._meta(ws).get("local", {}).get("isolated"))
        if not daemon.agent_stopped(ws.pid_file, isolated=isolated):
            return False
        with self._held(ws) as meta:
            if not daemon.agent_stopped(ws.pid_file, isolated=isolated):
                return False  # another caller restarted it while we waited for the lock
            log.warning("the agent of %s was stopped: restarting it", meta["workspace_id"])
            daemon.stop(ws.pid_file, process_marker(meta["workspace_id"]))
            self._start_daemon(ws, meta)
        return True

    async def destroy(self, workspace_id: str, *, keep_snapshots: bool = False) -> None:
        ws = self._dir(workspace_id)
        await asyncio.to_thread(self._destroy_sync, ws, keep_snapshots)
        self._secret_env.pop(workspace_id, None)
        self._socket_paths.forget(ws.socket)

    async def close(self) -> None:
        # Daemons are not the server's to stop: they keep the workspaces running between
        # server processes.
        self._socket_paths.close()

    async def end_strays(self) -> None:
        """Ends the host's helpers (pasta) that outlived their workspace's sandbox: the
        lifecycle sweep's call (`janitor.py`), as this driver's start did."""
        await asyncio.to_thread(self._end_strays)

    def _end_strays(self) -> None:
        for workspace_id in pasta.end_strays(self.data_root, process_marker):
            log.warning("ended the pasta of %s, whose sandbox had ended", workspace_id)

    # --- blocking parts, run in a thread ----------------------------------------------------

    def _create_sync(
        self,
        ws: WorkspaceDir,
        meta: dict[str, Any],
        fill: Callable[[WorkspaceDir, dict[str, Any]], None] | None = None,
    ) -> None:
        try:
            ws.make()
        except FileExistsError:
            raise ConflictError(
                "conflict", f"workspace {meta['workspace_id']} already exists", "workspace_id"
            ) from None
        try:
            with ws.locked():
                if meta["local"]["isolated"] and uids.enabled():
                    self._give_own_uid(ws, meta)
                else:
                    self._write(ws, meta)
                if fill is not None:
                    fill(ws, meta)
                self._start_daemon(ws, meta)
        except BaseException:
            daemon.stop(ws.pid_file, process_marker(meta["workspace_id"]))
            with contextlib.suppress(UpstreamError):
                self._release_disk(ws)
            try:
                self.records.remove_now(meta["workspace_id"])
            finally:
                ws.remove()
            raise

    def _give_own_uid(self, ws: WorkspaceDir, meta: dict[str, Any]) -> None:
        """Records a uid slot of the workspace's own (chosen under the data root's lock) and
        hands its files and home to that uid; the agent's state stays root's."""
        with uids.allocation_lock(self.data_root):
            used = [
                m.get("local", {}).get("uid_slot")
                for m in (self._recorded(other) for other in self._workspace_dirs())
                if m is not None
            ]
            slot = uids.free_slot(u for u in used if isinstance(u, int))
            meta["local"]["uid_slot"] = slot
            self._write(ws, meta)
        ids = uids.host_ids(slot)
        for part in (ws.workspace, ws.home):
            os.chown(part, ids.commands, ids.commands)
        if self.disk_mb is not None:
            meta["local"]["disk_mb"] = self.disk_mb
            self._write(ws, meta)
            try:
                WorkspaceDisk(ws.path).create(self.disk_mb, ids.commands)
            except DiskError as err:
                raise UpstreamError("upstream", f"cannot give the workspace a disk: {err}") from err
        # The data root's directories are the gateway's (0700); bwrap sets the sandbox up as
        # the gateway's root, so the workspace's uid never needs to reach them on the host.

    def _get_sync(self, ws: WorkspaceDir) -> WorkspaceRecord:
        meta = self._meta(ws)
        return as_record(meta, live_state(ws, meta))

    def _list_sync(self) -> builtins.list[WorkspaceRecord]:
        records = []
        for ws in self._workspace_dirs():
            meta = self._recorded(ws)
            if meta is not None:  # a workspace being created has no record yet
                records.append(as_record(meta, live_state(ws, meta)))
        return sorted(records, key=lambda r: (r.created_at, r.workspace_id))

    def _set_tags_sync(self, ws: WorkspaceDir, tags: dict[str, str]) -> WorkspaceRecord:
        with self._held(ws) as meta:
            meta["tags"] = {**meta.get("tags", {}), **tags}
            self._write(ws, meta)
        return as_record(meta, live_state(ws, meta))

    def _ensure_daemon(self, ws: WorkspaceDir) -> None:
        with self._held(ws) as meta:
            # Suspended or ended meanwhile: only a resume starts its agent again.
            check_live(meta)
            if daemon.running(ws.pid_file) and daemon.accepts(ws.socket):
                return  # restarted by another caller while we waited for the lock
            # Whatever remains of the earlier daemon (hung, or its sandbox's commands) goes
            # first: the new daemon reports those commands as lost, so none runs unsupervised.
            daemon.stop(ws.pid_file, process_marker(meta["workspace_id"]))
            if meta["workspace_id"] not in self._secret_env:
                log.warning(
                    "restarting the agent of %s without its secret environment (not kept on disk)",
                    meta["workspace_id"],
                )
            self._start_daemon(ws, meta)

    def _destroy_sync(self, ws: WorkspaceDir, keep_snapshots: bool) -> None:
        with self._held(ws) as meta:
            workspace_id = meta["workspace_id"]
            daemon.stop(ws.pid_file, process_marker(workspace_id))
            self._release_disk(ws)
            if not keep_snapshots:
                # Its snapshots first, while the record that leads a later purge to them is
                # still there (removing them may fail: the next purge tries again); then the
                # record, so that a directory left without one (removing it failed) reads as
                # never made, as an interrupted create's does.
                self.snapshots.delete_all(workspace_id)
                self.records.remove_now(workspace_id)
                ws.remove()
                return
            # Ended, its record kept so that a snapshot can bring it back: its files go, its
            # directory stays (what lists it, and its lock).
            for entry in ws.path.iterdir():
                if entry.name != ".lock":
                    if entry.is_dir() and not entry.is_symlink():
                        remove_tree(entry)
                    else:
                        entry.unlink()
            meta.pop("suspension", None)
            meta["terminated_at"] = utc_now()
            self._write(ws, meta)

    def _release_disk(self, ws: WorkspaceDir) -> None:
        try:
            WorkspaceDisk(ws.path).release()
        except DiskError as err:
            raise UpstreamError("upstream", f"cannot release the workspace's disk: {err}") from err

    def _start_daemon(self, ws: WorkspaceDir, meta: dict[str, Any]) -> None:
        secret_env = self._secret_env.get(meta["workspace_id"], {})
        self._launcher().start(ws, meta, secret_env)

    def _launcher(self) -> AgentLauncher:
        return AgentLauncher(
            data_root=self.data_root,
            isolation=self.isolation,
            agent_argv=self.agent_argv,
            start_timeout=self.start_timeout,
            host_ports=self.host_ports,
            limits=self.limits,
            network_problem=self.network_problem,
        )

    def _dir(self, workspace_id: str) -> WorkspaceDir:
        # The id becomes a path component: only a well-formed id gets that far.
        with core_refusal("workspace_id"):
            policy.check_id("ws", workspace_id)
        return WorkspaceDir(self.data_root / workspace_id)

    def _workspace_dirs(self) -> Iterator[WorkspaceDir]:
        """Every workspace's directory (some being created or removed: no record yet, or none
        any more)."""
        for path in self.data_root.glob("ws-*"):
            if is_workspace_id(path.name):
                yield WorkspaceDir(path)

    def _settle_records(self) -> None:
        """Moves the records an earlier version kept in workspaces' directories into the store,
        and drops records whose directory is gone (its removal was interrupted)."""
        for ws in self._workspace_dirs():
            if self.records.adopt_meta_file(ws):
                log.info("moved the record of %s into the data root's store", ws.path.name)
        for workspace_id in self.records.recorded_now():
            if not (self.data_root / workspace_id).is_dir():
                self.records.remove_now(workspace_id)

    @contextlib.contextmanager
    def _held(self, ws: WorkspaceDir) -> Iterator[dict[str, Any]]:
        """The workspace's lock, and its record read under it (it may have been destroyed
        while we waited)."""
        try:
            with ws.locked():
                yield self._meta(ws)
        except WorkspaceGone:
            raise self._not_found(ws) from None

    def _not_found(self, ws: WorkspaceDir) -> NotFoundError:
        return NotFoundError(
            "not_found", f"workspace {ws.path.name} does not exist", "workspace_id"
        )

    def _meta(self, ws: WorkspaceDir) -> dict[str, Any]:
        meta = self._recorded(ws)
        if meta is None:
            raise self._not_found(ws)
        return meta

    def _recorded(self, ws: WorkspaceDir) -> dict[str, Any] | None:
        """The workspace's record; None while its directory is not there (a removal whose
        record outlived it) or has no record (a create not finished, or interrupted)."""
        if not ws.path.is_dir():
            return None
        return self.records.read_now(ws.path.name)

    def _write(self, ws: WorkspaceDir, meta: dict[str, Any]) -> None:
        """Puts the workspace's record; the caller holds its lock."""
        self.records.write_now(ws.path.name, meta)


# What this driver can enforce of `resources`: the memory bound as each command's address space
# (an rlimit: cgroups are not used; the limit when one is given, else the request), and the
# lifetime and idle limit (the gateway's lifecycle suspends the workspace, with a snapshot, when
# one passes). CPU shares and GPUs are Modal's, and a value that would only be stored is refused.
# Volumes are bound into the sandbox (`volumes`).
_ENFORCED_RESOURCES = (
    "memory_mb",
    "memory_limit_mb",
    "timeout_seconds",
    "idle_timeout_seconds",
    "volumes",
    # Served to a browser through the agent's relays (`open_port`): nothing to enforce.
    "ports",
)
# Why the fields a client may well send cannot apply here (others get the general reason).
_WHY_NOT = {
    "cpu": "this machine offers no CPU controller to reserve cores with",
    "cpu_limit": "this machine offers no CPU controller to throttle with",
    "region": "a local workspace runs on this machine",
    # Its sandboxes are given no GPU device and no driver to reach one, so none could be used.
    "gpu": "it passes no GPU into its sandboxes; GPU workspaces run on the Modal driver",
    RUN_AS_ROOT: "its commands never run as root",
    "outbound_cidr_allowlist": "its only network rule is block_network (all or nothing)",
    "outbound_domain_allowlist": "its only network rule is block_network (all or nothing)",
}


def _check_resources(resources: dict[str, Any]) -> None:
    for key, value in resources.items():
        if key == RUN_AS_ROOT and value is not True:
            continue  # commands run as an unprivileged user here: that is what it asks
        if value is not None and key not in _ENFORCED_RESOURCES:
            why = _WHY_NOT.get(key, f"it applies {', '.join(_ENFORCED_RESOURCES)}")
            raise InvalidArgumentError(
                "invalid_argument",
                f"resources.{key[:32]} cannot be enforced by the local driver ({why}); leave it "
                "out, or use the Modal driver",
                f"resources.{key[:32]}",
            )


def _check_tags(tags: dict[str, str]) -> None:
    # The core's rule for stored tags: this driver writes no workspace tags (its record has the
    # id, root and creation time as fields), so no request may set one.
    for key, value in tags.items():
        with core_refusal(f"tags.{key[:32]}"):
            policy.stored_tag(key, value)


def _check_env(env: dict[str, str], field: str) -> None:
    for name, value in env.items():
        with core_refusal(field):
            policy.env_name(name)
        if "\0" in value:
            raise InvalidArgumentError(
                "invalid_argument", f"the value of {name} contains a NUL character", field
            )
