"""The Modal driver: each workspace is one Modal Sandbox, named after the workspace id in one
sandbox app, tagged with the managed tags, running the workspace agent as its entrypoint.

It is found with `Sandbox.from_name` (never by listing per request) and reached through the agent
channel (`modal_channel`): one exec of the agent's `connect` mode, after which starting, polling,
input and cancel cost no further Modal calls. Every SDK call is an `.aio` call.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, cast

import modal
import modal.exception

from ..._core import PolicyError
from ...errors import (
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    UpstreamError,
    WorkspaceError,
)
from ...policy import WORKSPACE_ROOT, WORKSPACE_TAGS, check_id, stored_tag
from ..base import WorkspaceRecord, WorkspaceSpec
from .channel import ChannelClient, ExecChannel
from .channel_key import channel_key, launch_config, resolve_channel_secret
from .config import (
    SECRETS_SETTING,
    ModalSecrets,
    ModalSettings,
    SandboxOptions,
    check_env,
    redacted_env,
    sandbox_options,
)

if TYPE_CHECKING:
    from ...channel.client import AgentClient
    from ...config import Settings

__all__ = ["ModalDriver", "ModalSettings"]

log = logging.getLogger(__name__)

MANAGED_BY = "modal-workspace-mcp"
# The tags only the driver writes (their names live in the core's policy): a caller's tags can
# never replace them.
TAG_MANAGED_BY, TAG_WORKSPACE_ID, TAG_WORKSPACE_ROOT, TAG_CREATED_AT = WORKSPACE_TAGS
# How long a filesystem snapshot is kept unless the caller says otherwise.
DEFAULT_SNAPSHOT_TTL_SECONDS = 7 * 24 * 3600


@contextlib.asynccontextmanager
async def _modal_errors(workspace_id: str) -> AsyncIterator[None]:
    """Turn the SDK's exceptions into the gateway's error model, naming the workspace."""
    try:
        yield
    except WorkspaceError:
        raise
    except modal.exception.NotFoundError:
        raise NotFoundError(
            "not_found", f"workspace {workspace_id} does not exist", "workspace_id"
        ) from None
    except modal.exception.AlreadyExistsError:
        raise ConflictError(
            "conflict", f"workspace {workspace_id} already exists", "workspace_id"
        ) from None
    except modal.exception.InvalidError as exc:
        raise InvalidArgumentError(
            "invalid_argument", f"Modal refused the request: {exc}"
        ) from None
    except modal.exception.Error as exc:
        raise UpstreamError(
            "upstream", f"Modal failed for workspace {workspace_id}: {type(exc).__name__}: {exc}"
        ) from None


@contextlib.asynccontextmanager
async def _missing_objects() -> AsyncIterator[None]:
    """While creating, "not found" means a secret, volume or image named in the request or the
    configuration is missing in Modal, not the workspace; and a secret that lacks a variable
    the allowlist lists for it is refused by Modal (FAILED_PRECONDITION, "Secret is missing
    key(s): …")."""
    try:
        yield
    except modal.exception.NotFoundError as exc:
        raise UpstreamError(
            "upstream", f"Modal has no such object: {exc}; create it or fix the configuration"
        ) from None
    except modal.exception.ConflictError as exc:
        if "missing key" not in str(exc):
            raise
        raise UpstreamError(
            "upstream",
            f"a Modal secret lacks a variable that {SECRETS_SETTING} lists for it ({exc}); "
            "add the variable to the secret or fix the setting",
        ) from None


def _workspace_id(workspace_id: str) -> str:
    try:
        return check_id("ws", workspace_id)
    except PolicyError as exc:
        raise InvalidArgumentError(
            "invalid_argument", f"workspace_id: {exc}", "workspace_id"
        ) from None


def _caller_tags(tags: Mapping[str, str], managed: Mapping[str, str]) -> dict[str, str]:
    """The caller's tags, refused where a key is malformed or would change a managed tag (the
    core's `stored_tag` rule)."""
    out: dict[str, str] = {}
    for key, value in tags.items():
        try:
            stored_tag(key, value, managed.get(key))
        except PolicyError as exc:
            field = f"tags.{key[:32]}"
            raise InvalidArgumentError("invalid_argument", f"{field}: {exc}", field) from None
        out[key] = value
    return out


async def _send_launch_config(sandbox: modal.Sandbox, key: str) -> None:
    """The daemon's launch configuration on its stdin, then end of input; a sandbox whose
    agent did not get it cannot be reached, so it is ended rather than left running."""
    try:
        sandbox.stdin.write(launch_config(key))
        sandbox.stdin.write_eof()
        await sandbox.stdin.drain.aio()
    except BaseException:
        with contextlib.suppress(Exception):
            await sandbox.terminate.aio()
        raise


class ModalDriver:
    """Workspaces as Modal Sandboxes. One instance per gateway process."""

    name = "modal"
    keeps_snapshots = True

    def __init__(
        self, settings: ModalSettings | None = None, *, channel_secret: bytes | None = None
    ) -> None:
        self.settings = settings or ModalSettings()
        # Resolved at first use, so that building a driver makes no Modal lookups.
        self._configured_channel_secret = channel_secret
        self._channel_secret: bytes | None = None
        self._app: modal.App | None = None
        self._app_lock = asyncio.Lock()
        self._channels: set[ExecChannel] = set()
        # The last client per workspace: a new channel resumes its streams from their cursors.
        self._clients: dict[str, AgentClient] = {}
        # A cache of what this process created; the sandbox's tags stay the record.
        self._resources: dict[str, dict[str, Any]] = {}

    def secret_source(self, settings: Settings) -> ModalSecrets:
        """Secrets as Modal Secrets on the sandbox (see `ModalSecrets`), never as values."""
        unlisted = [name for name in settings.allowed_secrets if name not in settings.secret_keys]
        if unlisted:
            log.warning(
                "the values of the secrets %s are NOT redacted from the output of workspaces "
                "that name them in secret_names: %s lists no variables for them "
                "(NAME:VAR1:VAR2 does)",
                ", ".join(unlisted),
                SECRETS_SETTING,
            )
        return ModalSecrets(
            settings.allowed_secrets,
            settings.github_secret,
            settings.secret_keys,
            github_token=settings.github_token,
        )

    def _channel_key(self, workspace_id: str) -> str:
        if self._channel_secret is None:
            self._channel_secret = resolve_channel_secret(self._configured_channel_secret)
        return channel_key(self._channel_secret, workspace_id)

    # -- lookups ------------------------------------------------------------------------------

    async def _sandbox_app(self) -> modal.App:
        async with self._app_lock:
            if self._app is None:
                self._app = await modal.App.lookup.aio(
                    self.settings.app_name, create_if_missing=True
                )
            return self._app

    async def _find(self, workspace_id: str) -> tuple[modal.Sandbox, bool]:
        """The workspace's sandbox and whether it is running; a terminated one is still found."""
        app_name = self.settings.app_name
        try:
            return await modal.Sandbox.from_name.aio(app_name, workspace_id), True
        except modal.exception.NotFoundError:
            pass
        # The most recent terminated sandbox of that name: 410-style "it was here".
        sandbox = await modal.Sandbox.from_name.aio(app_name, workspace_id, include_terminated=True)
        return sandbox, False

    async def _running(self, workspace_id: str) -> modal.Sandbox:
        sandbox, running = await self._find(workspace_id)
        if not running or sandbox.returncode is not None:
            raise NotFoundError(
                "not_found", f"workspace {workspace_id} was terminated", "workspace_id"
            )
        return sandbox

    def _record(self, workspace_id: str, tags: Mapping[str, str], running: bool) -> WorkspaceRecord:
        return WorkspaceRecord(
            workspace_id=workspace_id,
            driver=self.name,
            root=tags.get(TAG_WORKSPACE_ROOT, WORKSPACE_ROOT),
            created_at=tags.get(TAG_CREATED_AT, ""),
            tags=dict(tags),
            state="running" if running else "terminated",
            resources=self._resources.get(workspace_id, {}),
            block_network=bool(self._resources.get(workspace_id, {}).get("block_network", False)),
        )

    # -- the contract -------------------------------------------------------------------------

    async def create(self, workspace_id: str, spec: WorkspaceSpec) -> WorkspaceRecord:
        """Start the workspace's sandbox with the agent daemon as its entrypoint.

        Everything the caller sent is checked (allowlists included) before the first Modal call.
        """
        workspace_id = _workspace_id(workspace_id)
        options = sandbox_options(spec.resources, self.settings)
        env = check_env(spec.env)
        created_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        managed = {
            TAG_MANAGED_BY: MANAGED_BY,
            TAG_WORKSPACE_ID: workspace_id,
            TAG_WORKSPACE_ROOT: WORKSPACE_ROOT,
            TAG_CREATED_AT: created_at,
        }
        tags = {**_caller_tags(spec.tags, managed), **managed}
        key = self._channel_key(workspace_id)
        # Secrets by name: Modal puts their values into the sandbox, the gateway never sees them.
        names = list(dict.fromkeys([*options.secret_names, *spec.secret_names]))
        keys = {**self.settings.secret_keys, **spec.secret_keys}
        # The variables whose values the agent redacts from every exec: names, never values.
        redact = redacted_env(names, keys, spec.secret_env)
        async with _modal_errors(workspace_id), _missing_objects():
            app = await self._sandbox_app()
            # With `required_keys`, Modal refuses a secret that lacks a listed variable, so a
            # variable the agent is told to redact is one the sandbox really has.
            secrets = [
                modal.Secret.from_name(name, required_keys=list(keys.get(name, ())))
                for name in names
            ]
            if spec.secret_env:
                # Values travel inside the create request, never in argv.
                secrets.append(modal.Secret.from_dict(dict(spec.secret_env)))
            sandbox = await modal.Sandbox.create.aio(
                *self.settings.daemon_argv(redact),
                app=app,
                name=workspace_id,
                tags=tags,
                image=self._image(options),
                env=dict[str, str | None](env) or None,
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
                block_network=spec.block_network,
                outbound_cidr_allowlist=options.outbound_cidr_allowlist,
                outbound_domain_allowlist=options.outbound_domain_allowlist,
                inbound_cidr_allowlist=options.inbound_cidr_allowlist,
            )
            await _send_launch_config(sandbox, key)
        self._resources[workspace_id] = {
            **options.recorded(),
            "block_network": spec.block_network,
        }
        if spec.secret_names:
            self._resources[workspace_id]["secret_names"] = list(dict.fromkeys(spec.secret_names))
        return self._record(workspace_id, tags, running=True)

    def _image(self, options: SandboxOptions) -> modal.Image:
        if options.image_id:
            return modal.Image.from_id(options.image_id)
        if options.image_name:
            return modal.Image.from_name(options.image_name)
        from .images import WheelNotFoundError, workspace_image

        try:
            return workspace_image()
        except WheelNotFoundError as exc:
            raise UpstreamError(
                "upstream",
                f"the default workspace image cannot be built: {exc}; or publish one and set "
                "MODAL_WORKSPACE_DEFAULT_IMAGE_NAME",
            ) from None

    async def get(self, workspace_id: str) -> WorkspaceRecord:
        workspace_id = _workspace_id(workspace_id)
        async with _modal_errors(workspace_id):
            sandbox, running = await self._find(workspace_id)
            tags = await sandbox.get_tags.aio()
        return self._record(workspace_id, tags, running and sandbox.returncode is None)

    async def list(self) -> list[WorkspaceRecord]:
        """Running workspaces of this gateway (the managed-by tag), newest first."""
        async with _modal_errors("list"):
            app = await self._sandbox_app()
            records = []
            async for sandbox in modal.Sandbox.list.aio(
                app_id=app.app_id, tags={TAG_MANAGED_BY: MANAGED_BY}
            ):
                tags = await sandbox.get_tags.aio()
                workspace_id = tags.get(TAG_WORKSPACE_ID, "")
                records.append(self._record(workspace_id, tags, running=True))
        return records

    async def set_tags(self, workspace_id: str, tags: dict[str, str]) -> WorkspaceRecord:
        """Replace the caller's tags; the managed ones are kept as they are."""
        workspace_id = _workspace_id(workspace_id)
        async with _modal_errors(workspace_id):
            sandbox = await self._running(workspace_id)
            current = await sandbox.get_tags.aio()
            managed = {k: v for k, v in current.items() if k in WORKSPACE_TAGS}
            merged = {**_caller_tags(tags, managed), **managed}
            await sandbox.set_tags.aio(merged)
        return self._record(workspace_id, merged, running=True)

    async def open_channel(self, workspace_id: str) -> ExecChannel:
        """One exec of the agent's `connect` mode, as a byte stream both ways."""
        workspace_id = _workspace_id(workspace_id)
        async with _modal_errors(workspace_id):
            sandbox = await self._running(workspace_id)
            process = await sandbox.exec.aio(*self.settings.connect_argv(), text=False)
        channel = ExecChannel(
            process,
            idle_seconds=self.settings.channel_idle_seconds,
            on_closed=self._channels.discard,
        )
        self._channels.add(channel)
        return channel

    async def connect(self, workspace_id: str) -> AgentClient:
        """An open agent client over a fresh channel. The channel closes itself after an idle
        period; the next `connect` opens another and resumes every stream the last client of
        this workspace followed from the last event it held, so nothing is lost or repeated.

        Right after create the daemon may not be listening yet (`connect` then exits at once):
        that is retried, with a growing pause, for `agent_start_seconds`.
        """
        from ...channel.client import AgentClient, AgentError

        deadline = time.monotonic() + self.settings.agent_start_seconds
        pause = 0.1
        while True:
            channel = await self.open_channel(workspace_id)
            previous = self._clients.get(workspace_id)
            try:
                client = await AgentClient.connect_transport(
                    channel.transport,
                    resume=previous if previous is not None and previous.closed else None,
                    key=self._channel_key(workspace_id),
                )
            except AgentError as exc:
                await channel.close()
                if time.monotonic() + pause > deadline:
                    raise UpstreamError(
                        "upstream",
                        f"the agent of workspace {workspace_id} does not answer: {exc.message}",
                    ) from None
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            except BaseException:
                await channel.close()
                raise
            self._clients[workspace_id] = client
            # An idle channel is closed through its client, which then reads as closed at once.
            channel.on_idle = client.close
            return cast("AgentClient", ChannelClient(client, channel))

    async def destroy(self, workspace_id: str) -> None:
        """Terminate the sandbox; afterwards the workspace is reported as terminated."""
        workspace_id = _workspace_id(workspace_id)
        async with _modal_errors(workspace_id):
            sandbox = await self._running(workspace_id)
            await sandbox.terminate.aio()
        client = self._clients.pop(workspace_id, None)
        if client is not None:
            await client.close()

    async def snapshot(self, workspace_id: str, ttl_seconds: int | None = None) -> str:
        """A filesystem snapshot of the workspace as an image id (`im-…`), kept for the TTL;
        a workspace created with `resources={"image_id": …}` starts from it."""
        workspace_id = _workspace_id(workspace_id)
        ttl = DEFAULT_SNAPSHOT_TTL_SECONDS if ttl_seconds is None else ttl_seconds
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
            raise InvalidArgumentError(
                "invalid_argument",
                "ttl_seconds must be a positive number of seconds",
                "ttl_seconds",
            )
        async with _modal_errors(workspace_id):
            sandbox = await self._running(workspace_id)
            image = await sandbox.snapshot_filesystem.aio(ttl=ttl)
        return str(image.object_id)

    async def close(self) -> None:
        for client in list(self._clients.values()):
            await client.close()
        self._clients.clear()
        for channel in list(self._channels):
            await channel.close()
        self._channels.clear()
