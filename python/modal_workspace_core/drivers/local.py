"""The local driver (the embedded default): workspaces on this machine, each a directory under a
data root with its own agent daemon, isolated with bubblewrap where bubblewrap works.

Reading a workspace never contacts its daemon; `connect` restarts a daemon that has died, and a
restarted server finds every workspace, its daemon and its exec logs again.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import getpass
import logging
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from .. import policy
from ..agent_client import AgentClient, AgentError
from ..errors import (
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    UpstreamError,
)
from . import local_daemon, sandbox
from .base import WorkspaceRecord, WorkspaceSpec
from .local_store import WorkspaceDir, WorkspaceGone, default_data_root, remove_leftovers

IsolationMode = Literal["auto", "bwrap", "none"]
ISOLATION_ENV = "MODAL_WORKSPACE_ISOLATION"
# Every process of a workspace carries this variable: commands find their workspace by it, and
# `destroy` finds the commands of an unisolated workspace by it.
WORKSPACE_ID_ENV = "MODAL_WORKSPACE_ID"

log = logging.getLogger(__name__)
_warned: set[str] = set()


class LocalDriver:
    """Workspaces as directories under `data_root`, each served by a detached agent daemon."""

    name = "local"

    def __init__(
        self,
        data_root: str | os.PathLike[str] | None = None,
        *,
        isolation: IsolationMode | None = None,
        agent_argv: list[str] | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        """`data_root` defaults to `$MODAL_WORKSPACE_DATA_ROOT`, else the user's data directory.
        `isolation` (default `$MODAL_WORKSPACE_ISOLATION`, else `auto`): `auto` uses bubblewrap
        when it works here and warns once when it does not; `bwrap` requires it; `none` never
        isolates. `agent_argv` is the command that runs `mwc-agent` (its subcommand follows)."""
        self.data_root = Path(data_root) if data_root is not None else default_data_root()
        self.data_root = self.data_root.expanduser().resolve()
        self.data_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        remove_leftovers(self.data_root)
        mode = isolation or os.environ.get(ISOLATION_ENV) or "auto"
        if mode not in ("auto", "bwrap", "none"):
            raise InvalidArgumentError(
                "invalid_argument",
                f"isolation ({ISOLATION_ENV}) must be auto, bwrap or none, not {mode[:32]!r}",
                field="isolation",
            )
        if mode == "none":
            self.isolation = sandbox.Isolation(False, None, "isolation turned off")
        else:
            self.isolation = sandbox.probe()
        if mode == "bwrap" and not self.isolation.enabled:
            raise UpstreamError("upstream", f"isolation=bwrap, but {self.isolation.reason}")
        if not self.isolation.enabled and self.isolation.reason not in _warned:
            _warned.add(self.isolation.reason)
            log.warning(
                "workspaces run UNISOLATED (%s): their commands can read and change all of "
                "this user's files and reach the network",
                self.isolation.reason,
            )
        # The agent runs from this interpreter's environment, ignoring PYTHON* variables a
        # workspace's env may set for its own commands.
        self.agent_argv = agent_argv or [sys.executable, "-I", "-m", "modal_workspace_core.agent"]
        self.start_timeout = start_timeout
        # Secret values live only in memory and in the daemon's environment, never on disk: a
        # daemon restarted by a later server process starts without them.
        self._secret_env: dict[str, dict[str, str]] = {}
        self._socket_paths = local_daemon.SocketPaths()

    # --- the contract -----------------------------------------------------------------------

    async def create(self, workspace_id: str, spec: WorkspaceSpec) -> WorkspaceRecord:
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
        isolated = self.isolation.enabled
        meta: dict[str, Any] = {
            "workspace_id": workspace_id,
            "driver": self.name,
            "root": sandbox.WORKSPACE_ROOT if isolated else str(ws.workspace),
            "created_at": datetime.now(UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "tags": dict(spec.tags),
            "state": "running",
            "resources": dict(spec.resources),
            "block_network": spec.block_network,
            # The driver's own part of the record: how to start the daemon again.
            "local": {"isolated": isolated, "env": dict(spec.env)},
        }
        self._secret_env[workspace_id] = dict(spec.secret_env)
        try:
            await asyncio.to_thread(self._create_sync, ws, meta)
        except BaseException:
            self._secret_env.pop(workspace_id, None)
            raise
        return _record(meta, "running")

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
        await asyncio.to_thread(self._meta, ws)
        # A path that stays valid: the client reconnects by it after a lost connection.
        path = self._socket_paths.get(ws.socket)
        with contextlib.suppress(OSError, AgentError):
            return await AgentClient.connect_unix(path)
        # Dead, or alive and not answering: (re)start it, once, under the workspace's lock.
        await asyncio.to_thread(self._ensure_daemon, ws)
        try:
            return await AgentClient.connect_unix(path)
        except (OSError, AgentError) as err:
            raise UpstreamError(
                "upstream", f"cannot reach the agent of workspace {workspace_id}: {err}"
            ) from err

    async def destroy(self, workspace_id: str) -> None:
        ws = self._dir(workspace_id)
        await asyncio.to_thread(self._destroy_sync, ws)
        self._secret_env.pop(workspace_id, None)
        self._socket_paths.forget(ws.socket)

    async def close(self) -> None:
        # Daemons are not the server's to stop: they keep the workspaces running between
        # server processes.
        self._socket_paths.close()

    # --- blocking parts, run in a thread ----------------------------------------------------

    def _create_sync(self, ws: WorkspaceDir, meta: dict[str, Any]) -> None:
        try:
            ws.make()
        except FileExistsError:
            raise ConflictError(
                "conflict", f"workspace {meta['workspace_id']} already exists", "workspace_id"
            ) from None
        try:
            with ws.locked():
                ws.write_meta(meta)
                self._start_daemon(ws, meta)
        except BaseException:
            local_daemon.stop(ws.pid_file, _marker(meta["workspace_id"]))
            ws.remove()
            raise

    def _get_sync(self, ws: WorkspaceDir) -> WorkspaceRecord:
        meta = self._meta(ws)
        return _record(meta, _state(ws))

    def _list_sync(self) -> builtins.list[WorkspaceRecord]:
        records = []
        for path in self.data_root.glob("ws-*"):
            ws = WorkspaceDir(path)
            meta = ws.read_meta()
            if meta is not None:  # a workspace being created has no metadata yet
                records.append(_record(meta, _state(ws)))
        return sorted(records, key=lambda r: (r.created_at, r.workspace_id))

    def _set_tags_sync(self, ws: WorkspaceDir, tags: dict[str, str]) -> WorkspaceRecord:
        with self._held(ws) as meta:
            meta["tags"] = {**meta.get("tags", {}), **tags}
            ws.write_meta(meta)
        return _record(meta, _state(ws))

    def _ensure_daemon(self, ws: WorkspaceDir) -> None:
        with self._held(ws) as meta:
            if local_daemon.accepts(ws.socket):
                return  # restarted by another caller while we waited for the lock
            # Whatever remains of the earlier daemon (hung, or its sandbox's commands) goes
            # first: the new daemon reports those commands as lost, so none runs unsupervised.
            local_daemon.stop(ws.pid_file, _marker(meta["workspace_id"]))
            if meta["workspace_id"] not in self._secret_env:
                log.warning(
                    "restarting the agent of %s without its secret environment (not kept on disk)",
                    meta["workspace_id"],
                )
            self._start_daemon(ws, meta)

    def _destroy_sync(self, ws: WorkspaceDir) -> None:
        with self._held(ws) as meta:
            local_daemon.stop(ws.pid_file, _marker(meta["workspace_id"]))
            ws.remove()

    def _start_daemon(self, ws: WorkspaceDir, meta: dict[str, Any]) -> None:
        workspace_id = meta["workspace_id"]
        local: dict[str, Any] = meta.get("local", {})
        isolated = bool(local.get("isolated"))
        if isolated and not self.isolation.enabled:
            raise UpstreamError(
                "upstream",
                f"workspace {workspace_id} was created isolated, and isolation no longer works "
                f"here ({self.isolation.reason}); it is not run unisolated",
            )
        env = {
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "USER": getpass.getuser(),
            "LOGNAME": getpass.getuser(),
            "SHELL": "/bin/bash",
            "PATH": sandbox.SANDBOX_PATH if isolated else os.environ.get("PATH", os.defpath),
            "HOME": sandbox.SANDBOX_HOME if isolated else str(ws.home),
            **local.get("env", {}),
            **self._secret_env.get(workspace_id, {}),
            WORKSPACE_ID_ENV: workspace_id,  # last: a workspace's env cannot change it
        }
        # Every command inherits the secret values: the agent redacts them from all output.
        secret_names = sorted(self._secret_env.get(workspace_id, {}))
        if isolated:
            daemon = self._daemon_argv(
                sandbox.WORKSPACE_ROOT,
                sandbox.AGENT_STATE_DIR,
                f"{sandbox.AGENT_SOCKET_DIR}/{ws.socket.name}",
                secret_names,
            )
            layout = sandbox.SandboxLayout(
                workspace=ws.workspace,
                home=ws.home,
                state=ws.state,
                socket_dir=ws.run,
                block_network=bool(meta.get("block_network")),
                hidden=(self.data_root, Path.home().resolve(), Path("/root")),
            )
            assert self.isolation.bwrap is not None
            argv = sandbox.bwrap_argv(
                self.isolation.bwrap, layout, daemon, readonly=sandbox.python_environment()
            )
        else:
            # The socket by its name in the daemon's cwd when a deep data root would exceed
            # the kernel's limit on a socket path.
            fits = local_daemon.fits_socket_path(ws.socket)
            socket = str(ws.socket) if fits else ws.socket.name
            argv = self._daemon_argv(str(ws.workspace), str(ws.state), socket, secret_names)
        try:
            local_daemon.start(
                argv,
                env,
                cwd=ws.run,
                log=ws.log,
                pid_file=ws.pid_file,
                socket_path=ws.socket,
                timeout=self.start_timeout,
            )
        except local_daemon.DaemonStartError as err:
            raise UpstreamError("upstream", f"workspace {workspace_id}: {err}") from err

    # --- helpers ----------------------------------------------------------------------------

    def _daemon_argv(
        self, root: str, state_dir: str, socket: str, secret_names: builtins.list[str]
    ) -> builtins.list[str]:
        # The names of the secret variables, never their values, travel in the argv.
        redact = ["--redact-env", ",".join(secret_names)] if secret_names else []
        return [
            *self.agent_argv,
            "daemon",
            *("--root", root),
            *("--state-dir", state_dir),
            *("--socket", socket),
            *redact,
        ]

    def _dir(self, workspace_id: str) -> WorkspaceDir:
        # The id becomes a path component: only a well-formed id gets that far.
        try:
            policy.check_id("ws", workspace_id)
        except policy.PolicyError as err:
            raise InvalidArgumentError("invalid_argument", str(err), "workspace_id") from err
        return WorkspaceDir(self.data_root / workspace_id)

    @contextlib.contextmanager
    def _held(self, ws: WorkspaceDir) -> Iterator[dict[str, Any]]:
        """The workspace's lock, and its metadata read under it (it may have been destroyed
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
        meta = ws.read_meta()
        if meta is None:
            raise self._not_found(ws)
        return meta


def _record(meta: dict[str, Any], state: str) -> WorkspaceRecord:
    return WorkspaceRecord.model_validate({**meta, "state": state})


def _marker(workspace_id: str) -> str:
    return f"{WORKSPACE_ID_ENV}={workspace_id}"


def _state(ws: WorkspaceDir) -> str:
    # Cheap and local: is the recorded daemon process alive? (`connect` restarts a stopped one.)
    return "running" if local_daemon.running(ws.pid_file) else "stopped"


def _check_tags(tags: dict[str, str]) -> None:
    # The core's rule for stored tags: this driver writes no workspace tags (its record has the
    # id, root and creation time as fields), so no request may set one.
    for key, value in tags.items():
        try:
            policy.stored_tag(key, value)
        except policy.PolicyError as err:
            field = f"tags.{key[:32]}"
            raise InvalidArgumentError("invalid_argument", f"{field}: {err}", field) from err


def _check_env(env: dict[str, str], field: str) -> None:
    for name, value in env.items():
        try:
            policy.env_name(name)
        except policy.PolicyError as err:
            raise InvalidArgumentError("invalid_argument", str(err), field) from err
        if "\0" in value:
            raise InvalidArgumentError(
                "invalid_argument", f"the value of {name} contains a NUL character", field
            )
