"""How the local driver starts one workspace's agent: the environment and launch configuration
its commands get (on the agent's stdin, never a host process's environment), and the process
that runs it, in its bubblewrap sandbox with its user ids, network and disk, or plain.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import UpstreamError
from ...policy import WORKSPACE_ROOT
from . import bubblewrap, bubblewrap_etc, bubblewrap_launch, daemon, pasta, uids, volumes
from .disk import DiskError, WorkspaceDisk
from .store import WorkspaceDir

# Every process of a workspace carries this variable: commands find their workspace by it, and
# `destroy` finds the commands of an unisolated workspace by it.
WORKSPACE_ID_ENV = "MODAL_WORKSPACE_ID"
# The only environment the host-side processes of a workspace (bwrap, pasta, its watcher) get.
_HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Bounds every command gets (rlimits; the processes bound counts per workspace only where the
# workspace has a uid of its own, that is when the gateway runs as root).
DEFAULT_LIMITS = {
    "processes": 1024,
    "open_files": 4096,
    "file_size_bytes": 16 << 30,
}


@dataclass(frozen=True)
class AgentLauncher:
    """The driver's settings that starting an agent needs."""

    data_root: Path
    isolation: bubblewrap.Isolation
    agent_argv: list[str]
    start_timeout: float
    host_ports: tuple[int, ...] = ()
    limits: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    # Why workspaces get no network here, when pasta is missing or does not work.
    network_problem: str = ""

    def start(self, ws: WorkspaceDir, meta: dict[str, Any], secret_env: dict[str, str]) -> None:
        """Starts the agent of `ws` and waits until it listens (UpstreamError otherwise)."""
        workspace_id = meta["workspace_id"]
        local: dict[str, Any] = meta.get("local", {})
        isolated = bool(local.get("isolated"))
        if isolated and not self.isolation.enabled:
            raise UpstreamError(
                "upstream",
                f"workspace {workspace_id} was created isolated, and isolation no longer works "
                f"here ({self.isolation.reason}); it is not run unisolated",
            )
        slot = local.get("uid_slot")
        ids = uids.host_ids(slot) if isolated and isinstance(slot, int) else None
        # The environment of the commands, secrets included: it reaches the agent on its stdin
        # and applies inside the sandbox only. The processes that start it (bwrap, pasta) run
        # with the fixed environment below, so nothing of a workspace's env (LD_PRELOAD, PATH)
        # ever acts on the host.
        command_env = {
            "LANG": "C.UTF-8",
            "USER": bubblewrap_etc.SANDBOX_USER if ids else getpass.getuser(),
            "LOGNAME": bubblewrap_etc.SANDBOX_USER if ids else getpass.getuser(),
            "SHELL": "/bin/bash",
            "PATH": bubblewrap.SANDBOX_PATH if isolated else os.environ.get("PATH", os.defpath),
            "HOME": bubblewrap.SANDBOX_HOME if isolated else str(ws.home),
            **local.get("env", {}),
            **secret_env,
            WORKSPACE_ID_ENV: workspace_id,  # last: a workspace's env cannot change it
        }
        launch_config: dict[str, Any] = {
            "env": command_env,
            "limits": self._limits(meta),
            # A new key at every start: whatever learnt an earlier one learnt nothing lasting.
            "channel_key": ws.new_channel_key(),
        }
        if ids is not None:
            launch_config["user"] = {
                "uid": bubblewrap_launch.COMMAND_ID,
                "gid": bubblewrap_launch.COMMAND_ID,
            }
            # The agent's own steps (git holding the token) as a uid the commands are not.
            launch_config["agent_user"] = {
                "uid": bubblewrap_launch.AGENT_GIT_ID,
                "gid": bubblewrap_launch.AGENT_GIT_ID,
            }
        host_env = {
            "PATH": _HOST_PATH,
            "LANG": "C.UTF-8",
            WORKSPACE_ID_ENV: workspace_id,  # the marker `daemon.stop` finds them by
        }
        # Every command inherits the secret values: the agent redacts them from all output.
        secret_names = sorted(secret_env)
        config = _memfd(json.dumps(launch_config).encode())
        try:
            if isolated:
                spawn = self._sandbox_spawn(ws, meta, ids, secret_names, config, host_env)
            else:
                # The socket by its name in the daemon's cwd when a deep data root would exceed
                # the kernel's limit on a socket path.
                fits = daemon.fits_socket_path(ws.socket)
                socket = str(ws.socket) if fits else ws.socket.name
                argv = self.daemon_argv(str(ws.workspace), str(ws.state), socket, secret_names)
                spawn = daemon.spawn_detached(argv, host_env, cwd=ws.run, stdin=config)
            daemon.start(
                spawn,
                log=ws.log,
                pid_file=ws.pid_file,
                socket_path=ws.socket,
                timeout=self.start_timeout,
            )
        except (daemon.DaemonStartError, bubblewrap_launch.LaunchError) as err:
            raise UpstreamError("upstream", f"workspace {workspace_id}: {err}") from err
        finally:
            os.close(config)

    def _sandbox_spawn(
        self,
        ws: WorkspaceDir,
        meta: dict[str, Any],
        ids: bubblewrap_launch.HostIds | None,
        secret_names: list[str],
        config: int,
        host_env: dict[str, str],
    ) -> daemon.Spawn:
        daemon = self.daemon_argv(
            WORKSPACE_ROOT,
            bubblewrap.AGENT_STATE_DIR,
            f"{bubblewrap.AGENT_SOCKET_DIR}/{ws.socket.name}",
            secret_names,
        )
        inside_id = bubblewrap_launch.COMMAND_ID if ids else os.getuid()
        files, home, tmp = ws.workspace, ws.home, None
        if meta.get("local", {}).get("disk_mb"):
            disk = WorkspaceDisk(ws.path)
            try:
                disk.mount()
            except DiskError as err:
                raise UpstreamError(
                    "upstream", f"cannot mount the workspace's disk: {err}"
                ) from err
            files, home, tmp = disk.workspace, disk.home, disk.tmp
        mounts = self._volumes(
            meta, ids, volumes.writable_roots(files, home, tmp, bubblewrap.SANDBOX_HOME)
        )
        etc_files = bubblewrap_etc.write_generated(
            ws.path / "etc", inside_id, inside_id if ids else os.getgid(), bubblewrap.SANDBOX_HOME
        )
        layout = bubblewrap.SandboxLayout(
            workspace=files,
            home=home,
            tmp=tmp,
            state=ws.state,
            socket_dir=ws.run,
            etc_files=tuple(etc_files),
            block_network=bool(meta.get("block_network")),
            hidden=(self.data_root, Path.home().resolve(), Path("/root")),
            volumes=mounts,
            mapped_ids=ids is not None,
        )
        network = None
        if not layout.block_network:
            if self.isolation.pasta is None:
                raise UpstreamError(
                    "upstream",
                    "workspaces reach the network through pasta, which cannot give them one "
                    f"here ({self.network_problem}); create the workspace with block_network",
                )
            network = bubblewrap_launch.Network(
                self.isolation.pasta, pasta.pid_file(ws.path), self.host_ports
            )
        bwrap = self.isolation.bwrap
        assert bwrap is not None
        readonly = bubblewrap.python_environment()

        def spawn(output: int) -> subprocess.Popen[bytes]:
            return bubblewrap_launch.launch(
                lambda fds: bubblewrap.bwrap_argv(
                    bwrap, layout, daemon, readonly=readonly, fds=fds
                ),
                stdin=config,
                output=output,
                env=host_env,
                cwd=ws.run,
                ids=ids,
                network=network,
            )

        return spawn

    def _volumes(
        self,
        meta: dict[str, Any],
        ids: bubblewrap_launch.HostIds | None,
        writable: dict[str, Path],
    ) -> tuple[tuple[Path, str], ...]:
        """The workspace's volumes as (host directory, path inside), their directories and
        mount points ready."""
        requested = meta.get("resources", {}).get("volumes") or {}
        mounts = []
        for inside, name in sorted(requested.items()):
            host = volumes.host_dir(self.data_root, name, ids.commands if ids else None)
            volumes.mount_point(inside, writable)
            mounts.append((host, inside))
        return tuple(mounts)

    def _limits(self, meta: dict[str, Any]) -> dict[str, int]:
        """The rlimits of every command: the workspace's memory (its limit, else its request) as
        each process's address space, and the driver's bounds on processes (per workspace uid),
        open files and the size of one file."""
        limits = dict(self.limits)
        resources = meta.get("resources", {})
        # The hard limit when there is one: a request alone has been this bound all along.
        memory_mb = resources.get("memory_limit_mb") or resources.get("memory_mb")
        if isinstance(memory_mb, int):
            limits["address_space_bytes"] = memory_mb << 20
        return limits

    # --- helpers ----------------------------------------------------------------------------

    def daemon_argv(
        self, root: str, state_dir: str, socket: str, secret_names: list[str]
    ) -> list[str]:
        # The names of the secret variables, never their values, travel in the argv.
        redact = ["--redact-env", ",".join(secret_names)] if secret_names else []
        return [
            *self.agent_argv,
            "daemon",
            *("--config", "-"),
            *("--root", root),
            *("--state-dir", state_dir),
            *("--socket", socket),
            *redact,
        ]


def _memfd(data: bytes) -> int:
    """An anonymous file holding `data`, positioned at its start (a daemon's stdin)."""
    fd = os.memfd_create("mwc-launch-config", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
