"""Starting a workspace's sandbox: the one `Sandbox.create` that create, resume and fork share,
and the launch configuration the agent's daemon reads from its stdin."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import modal
import modal.exception

from ...config import ModalSettings
from ...policy import WORKSPACE_ROOT
from .agent_argv import daemon_argv
from .channel_key import launch_config
from .exits import EXIT_SNAPSHOT_OPTIONS
from .records import StoredSecretEnv
from .sandbox_options import SandboxOptions
from .secret_env import attach
from .secrets import redacted_env

__all__ = ["Launch", "PooledSandboxEnded", "claim_sandbox", "start_sandbox"]

# A fork's files are its parent's, but its exec history starts empty: the agent's state dir in
# the snapshot holds the parent's exec records and logs, so it is removed before the daemon
# starts (the daemon makes a new one). A resume keeps it: that history is the workspace's own.
_FRESH_STATE = 'rm -rf -- "$0" && exec "$@"'


class PooledSandboxEnded(modal.exception.Error):
    """A warm pool's sandbox ended before its claim."""


@dataclass
class Launch:
    """What one sandbox of a workspace starts with, every value already checked."""

    # Its name; "" for a warm pool's entry, which has none (a claim gives it only tags).
    workspace_id: str
    options: SandboxOptions
    image: modal.Image
    tags: dict[str, str]
    env: dict[str, str] = field(default_factory=dict)
    secret_names: Sequence[str] = ()
    secret_keys: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # The workspace's own Secret (its `secret_env`), attached by id: its values never pass here.
    secret_env: StoredSecretEnv | None = None
    block_network: bool = False
    fresh_state: bool = False
    # The workspace's first sandbox (a create, not a resume or a fork): no command has run.
    first_start: bool = False


async def start_sandbox(
    app: modal.App, settings: ModalSettings, launch: Launch, channel_key: str | None
) -> modal.Sandbox:
    """Creates the sandbox (exit snapshot enabled) with the agent's daemon as its entrypoint and
    hands the daemon its channel key; without one (a warm pool's entry) the daemon waits for
    the configuration a claim sends (`claim_sandbox`)."""
    options = launch.options
    names = list(dict.fromkeys([*options.secret_names, *launch.secret_names]))
    keys = {**settings.secret_keys, **launch.secret_keys}
    # The variables whose values the agent redacts from every exec: names, never values.
    own = launch.secret_env
    redacted = redacted_env(names, keys, own.keys if own is not None else ())
    argv: tuple[str, ...] = daemon_argv(settings, redacted)
    if launch.fresh_state:
        argv = ("sh", "-c", _FRESH_STATE, settings.agent_state_dir, *argv)
    # With `required_keys`, Modal refuses a secret that lacks a listed variable, so a variable
    # the agent is told to redact is one the sandbox really has.
    secrets = [
        modal.Secret.from_name(name, required_keys=list(keys.get(name, ()))) for name in names
    ]
    if own is not None:
        secrets.append(attach(own))
    sandbox = await modal.Sandbox.create.aio(
        *argv,
        app=app,
        name=launch.workspace_id or None,
        tags=launch.tags,
        image=launch.image,
        env=dict[str, str | None](launch.env) or None,
        secrets=secrets,
        volumes={p: modal.Volume.from_name(n) for p, n in options.volumes.items()},
        workdir=WORKSPACE_ROOT,
        timeout=options.timeout,
        idle_timeout=options.idle_timeout,
        gpu=options.gpu,
        cloud=options.cloud,
        region=options.region,
        cpu=options.cpu,
        memory=options.memory,
        block_network=launch.block_network,
        outbound_cidr_allowlist=options.outbound_cidr_allowlist,
        outbound_domain_allowlist=options.outbound_domain_allowlist,
        inbound_cidr_allowlist=options.inbound_cidr_allowlist,
        encrypted_ports=list(options.ports),
        experimental_options=dict(EXIT_SNAPSHOT_OPTIONS),
    )
    if channel_key is not None:
        await _send_launch_config(sandbox, _config(launch, channel_key))
    return sandbox


async def claim_sandbox(sandbox: modal.Sandbox, launch: Launch, channel_key: str) -> None:
    """Makes a warm pool's waiting sandbox (started with this launch's options and image) the
    workspace's: its tags and its daemon's configuration, and whether it still runs, at once.
    One that ended while it waited (`PooledSandboxEnded`), or takes either not, is ended and
    its tags cleared, so that no sandbox but the one the caller starts instead reads as the
    workspace's."""
    try:
        _, _, returncode = await asyncio.gather(
            sandbox.set_tags.aio(launch.tags),
            _send_launch_config(sandbox, _config(launch, channel_key)),
            sandbox.poll.aio(),
        )
        if returncode is not None:
            raise PooledSandboxEnded(f"it ended while it waited (code {returncode})")
    except BaseException:
        with contextlib.suppress(Exception):
            await sandbox.set_tags.aio({})
        with contextlib.suppress(Exception):
            await sandbox.terminate.aio()
        raise


def _config(launch: Launch, channel_key: str) -> bytes:
    options = launch.options
    return launch_config(
        channel_key,
        run_as_root=options.run_as_root,
        first_start=launch.first_start,
        volume_roots=sorted(options.volumes),
    )


async def _send_launch_config(sandbox: modal.Sandbox, config: bytes) -> None:
    """The daemon's launch configuration on its stdin, then end of input; a sandbox whose
    agent did not get it cannot be reached, so it is ended rather than left running."""
    try:
        sandbox.stdin.write(config)
        sandbox.stdin.write_eof()
        await sandbox.stdin.drain.aio()
    except BaseException:
        with contextlib.suppress(Exception):
            await sandbox.terminate.aio()
        raise
