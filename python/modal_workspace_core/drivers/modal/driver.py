"""The Modal driver: each workspace is one Modal Sandbox at a time, named after the workspace id
in one sandbox app, tagged with the managed tags, running the workspace agent as its entrypoint.

A running workspace is found with `Sandbox.from_name` (never by listing per request) and
reached through the agent channel (`modal_channel`): one exec of the agent's `connect` mode,
after which starting, polling, input and cancel cost no further Modal calls. A workspace whose
sandbox has ended (suspended, or terminated and kept) is found through the list call, which
carries the tags that hold its records (`records`). Every SDK call is an `.aio` call.
Snapshots, resume, fork, suspend and notes are `lifecycle`'s, a mixin of this driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import modal
import modal.exception

from ..._core import CHANNEL_KEEPALIVE_SECONDS
from ...channel.client import AgentClient
from ...config import ALLOWED_SECRETS_ENV, DEFAULT_IMAGE_NAME_ENV, ModalSettings
from ...errors import (
    AgentError,
    NotFoundError,
    UpstreamError,
    core_refusal,
)
from ...policy import WORKSPACE_ROOT, WORKSPACE_TAGS, stored_tag
from ...shared_store import SharedStore
from ..base import (
    Lineage,
    WorkspaceRecord,
    WorkspaceSpec,
    utc_now,
)
from . import records
from .agent_argv import connect_argv
from .channel import ChannelClient, ExecChannel
from .channel_key import channel_key, resolve_channel_secret
from .default_image import DefaultImage
from .image_request import ImageRequest, build_progress, with_packages
from .images import WheelNotFoundError, wheel_source
from .launch import Launch, claim_sandbox, start_sandbox
from .lifecycle import ModalLifecycle
from .lookup import (
    UNLISTED_END,
    Current,
    SandboxInfo,
    checked_workspace_id,
    list_sandboxes,
)
from .modal_errors import missing_objects, modal_errors
from .sandbox_options import SandboxOptions, check_env, sandbox_options
from .secret_env import delete_secret_env, make_secret_env
from .secrets import ModalSecrets
from .snapshots import delete_image
from .tunnels import tunnel_url
from .volume_store import VolumeStore
from .warm_pool import WarmPool, end_stray_pools
from .workspace_lookup import (
    MANAGED_BY,
    TAG_CREATED_AT,
    TAG_MANAGED_BY,
    TAG_WORKSPACE_ID,
    TAG_WORKSPACE_ROOT,
    WorkspaceLookup,
)
from .workspace_records import TAG_VERSION, WorkspaceRecords

if TYPE_CHECKING:
    from ...config import Settings

__all__ = ["ModalDriver", "ModalSettings"]

log = logging.getLogger(__name__)


def _caller_tags(tags: Mapping[str, str], managed: Mapping[str, str]) -> dict[str, str]:
    """The caller's tags, refused where a key is malformed, is one of the driver's records, or
    would change a managed tag (the core's `stored_tag` rule)."""
    out: dict[str, str] = {}
    for key, value in tags.items():
        with core_refusal(f"tags.{key[:32]}"):
            stored_tag(key, value, managed.get(key))
        out[key] = value
    return out


def _packages(options: SandboxOptions) -> ImageRequest:
    return ImageRequest(
        apt_packages=tuple(options.apt_packages), pip_packages=tuple(options.pip_packages)
    )


class ModalDriver(WorkspaceLookup, ModalLifecycle):
    """Workspaces as Modal Sandboxes. One instance per gateway process."""

    name = "modal"
    keeps_snapshots = True
    hidden_paths: tuple[str, ...] = ()
    ends_idle_workspaces = True
    # Modal attaches the GPU a workspace asks for: the service holds it to the allowlist first.
    attaches_gpus = True

    def __init__(
        self,
        settings: ModalSettings | None = None,
        *,
        channel_secret: bytes | None = None,
        keepalive_seconds: int = CHANNEL_KEEPALIVE_SECONDS,
    ) -> None:
        self.settings = settings or ModalSettings()
        self.shared_store: SharedStore = VolumeStore(self.settings.state_volume)
        # The workspaces' records, kept for good (sandbox tags are their copy and index).
        self._records = WorkspaceRecords(self.shared_store)
        # What this process made or resumed moments ago (`just_made`).
        self._made: dict[str, tuple[WorkspaceRecord, float]] = {}
        # How often a channel's Hello promises the agent a frame (`Settings`).
        self.keepalive_seconds = keepalive_seconds
        # Resolved at first use, so that building a driver makes no Modal lookups.
        self._configured_channel_secret = channel_secret
        self._channel_secret: bytes | None = None
        self._app: modal.App | None = None
        self._app_lock = asyncio.Lock()
        self._channels: set[ExecChannel] = set()
        # The last client per workspace: a new channel resumes its streams from their cursors.
        self._clients: dict[str, AgentClient] = {}
        # The running sandbox of each workspace as this process last saw it: a handle that
        # already knows its task and its command router, so that a channel opens without a
        # lookup. A cache, never the record: dropped when this gateway ends or replaces the
        # sandbox, and when an exec on it fails (it ended some other way); then looked up.
        self._handles: dict[str, modal.Sandbox] = {}
        # The configured wheel (`ModalSettings.wheel`), else the checkout, found at each create.
        self._default_image = DefaultImage(
            find=functools.partial(wheel_source, self.settings.wheel)
        )
        # Sandboxes of the default resources started ahead of creates (`keep_warm`); None
        # while it is off (`ModalSettings.warm_pool`) or not started.
        self.pool: WarmPool | None = None

    def secret_source(self, settings: Settings) -> ModalSecrets:
        """Secrets as Modal Secrets on the sandbox (see `ModalSecrets`), never as values."""
        unlisted = [name for name in settings.allowed_secrets if name not in settings.secret_keys]
        if unlisted:
            log.warning(
                "the values of the secrets %s are NOT redacted from the output of workspaces "
                "that name them in secret_names: %s lists no variables for them "
                "(NAME:VAR1:VAR2 does)",
                ", ".join(unlisted),
                ALLOWED_SECRETS_ENV,
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

    async def _app_id(self) -> str:
        return str((await self._sandbox_app()).app_id)

    # -- create, get, list, tags --------------------------------------------------------------

    async def create(self, workspace_id: str, spec: WorkspaceSpec) -> WorkspaceRecord:
        """Start the workspace's sandbox with the agent daemon as its entrypoint.

        Everything the caller sent is checked (allowlists included) before the first Modal call.
        """
        return await self._new_workspace(workspace_id, spec)

    async def _new_workspace(
        self,
        workspace_id: str,
        spec: WorkspaceSpec,
        *,
        image: modal.Image | None = None,
        lineage: Lineage | None = None,
    ) -> WorkspaceRecord:
        workspace_id = checked_workspace_id(workspace_id)
        options = sandbox_options(
            spec.resources, self.settings, block_network=spec.block_network, new_workspace=True
        )
        env = check_env(spec.env)
        now = utc_now()
        managed = {
            TAG_MANAGED_BY: MANAGED_BY,
            TAG_WORKSPACE_ID: workspace_id,
            TAG_WORKSPACE_ROOT: WORKSPACE_ROOT,
            TAG_CREATED_AT: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        resources: dict[str, Any] = {**options.recorded(), "block_network": spec.block_network}
        if spec.secret_names:
            resources["secret_names"] = list(dict.fromkeys(spec.secret_names))
        if image is not None:
            # A fork's image is its snapshot's, not one the resources name.
            resources.pop("image_id", None)
            resources.pop("image_name", None)
        tags = {
            **_caller_tags(spec.tags, managed),
            **managed,
            records.TAG_RESOURCES: records.resources_value(resources),
            records.TAG_STARTED: now,
        }
        if lineage is not None:
            tags[records.TAG_LINEAGE] = records.lineage_value(lineage)
        if spec.secret_env:
            # Refused before the Secret is made: a record too long to keep would leave it behind.
            records.StoredSecretEnv("st-" + "0" * 22, tuple(sorted(spec.secret_env))).value()
        launch = Launch(
            workspace_id=workspace_id,
            options=options,
            image=image if image is not None else self._image(options),
            tags=tags,
            env=env,
            secret_names=spec.secret_names,
            secret_keys=spec.secret_keys,
            block_network=spec.block_network,
            # A fork's files come with its parent's exec history, which is not the fork's.
            fresh_state=lineage is not None,
            first_start=lineage is None,
        )
        async with modal_errors(workspace_id), missing_objects():
            app = await self._sandbox_app()
            if spec.secret_env:
                # A Secret of the workspace's own (a fork makes its own from its own spec), so
                # that a resume attaches the same values by id.
                launch.secret_env = await make_secret_env(str(app.app_id), spec.secret_env)
                tags[records.TAG_SECRET_ENV] = launch.secret_env.value()
            # The first version of its records (so the sandbox's copy names version 1),
            # committed while the sandbox starts.
            launch.tags = {**tags, TAG_VERSION: "1"}
            try:
                async with build_progress(_packages(options) if image is None else ImageRequest()):
                    poolable = image is None and not env and not spec.secret_names
                    sandbox, _ = await asyncio.gather(
                        self._start(app, launch, poolable=poolable and not spec.secret_env),
                        self._records.update(workspace_id, lambda _: dict(tags), new=True),
                    )
            except BaseException:
                self._default_image.forget()
                # No workspace holds it: its values are not left at Modal, nor its records.
                if launch.secret_env is not None:
                    await delete_secret_env(launch.secret_env)
                with contextlib.suppress(Exception):
                    await self._records.forget(workspace_id)
                raise
        self._handles[workspace_id] = sandbox
        record = self._record(Current(workspace_id, sandbox, tags, None))
        self._made[workspace_id] = (record, time.monotonic())
        return record

    async def _start(self, app: modal.App, launch: Launch, *, poolable: bool) -> modal.Sandbox:
        """The workspace's first sandbox: a warm pool's waiting one where the create's would be
        just such a one (`poolable`: nothing of its own in the sandbox's environment, and the
        same options), else a new one."""
        key = self._channel_key(launch.workspace_id)
        pooled = None
        if poolable and self.pool is not None and not launch.block_network:
            pooled = self.pool.claim(launch.options)
        if pooled is not None:
            try:
                await claim_sandbox(pooled.sandbox, launch, key)
                return pooled.sandbox
            except modal.exception.Error as exc:
                # It ended while it waited: a new one, as without the pool.
                log.info("a warm sandbox could not be claimed (%s); starting one", exc)
        return await start_sandbox(app, self.settings, launch, key)

    async def keep_warm(self) -> None:
        """Keeps the warm pool full while the gateway serves (`ModalSettings.warm_pool`
        sandboxes of the default resources; nothing when it is 0). Background work: runs until
        cancelled; `close` ends what waits."""
        if self.settings.warm_pool <= 0 or self.pool is not None:
            return
        options = sandbox_options({}, self.settings, new_workspace=True)
        self.pool = WarmPool(self.settings.warm_pool, options, self._start_pool_entry)
        await self.pool.run()

    async def _start_pool_entry(
        self, options: SandboxOptions, tags: dict[str, str]
    ) -> modal.Sandbox:
        async with missing_objects():
            app = await self._sandbox_app()
            launch = Launch(workspace_id="", options=options, image=self._image(options), tags=tags)
            sandbox = await start_sandbox(app, self.settings, launch, None)
            try:
                # Waiting only once its container runs (an exec waits for that), with a handle
                # that knows its task and command router: the claim's first exec looks nothing
                # up. Nothing of a workspace is in it yet.
                process = await sandbox.exec.aio("true")
                await process.wait.aio()
            except BaseException:
                with contextlib.suppress(Exception):
                    await sandbox.terminate.aio()
                raise
            return sandbox

    async def end_strays(self) -> None:
        """Ends the waiting sandboxes of warm pools whose gateway stopped (the sweep's)."""
        async with modal_errors("warm pool"):
            ended = await end_stray_pools(
                await self._app_id(), self.pool.pool_id if self.pool is not None else None
            )
        if ended:
            log.info("ended %d waiting sandboxes of warm pools whose gateway stopped", ended)

    def _image(self, options: SandboxOptions) -> modal.Image:
        return with_packages(self._base_image(options), _packages(options))

    def _base_image(self, options: SandboxOptions) -> modal.Image:
        if options.image_id:
            return modal.Image.from_id(options.image_id)
        if options.image_name:
            return modal.Image.from_name(options.image_name)
        try:
            return self._default_image.get()
        except WheelNotFoundError as exc:
            raise UpstreamError(
                "upstream",
                f"the default workspace image cannot be built: {exc}; or publish one and set "
                f"{DEFAULT_IMAGE_NAME_ENV}",
            ) from None

    async def get(self, workspace_id: str) -> WorkspaceRecord:
        workspace_id = checked_workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._observe(await self._current(workspace_id))
        return self._record(current)

    async def list(self) -> list[WorkspaceRecord]:
        """Every workspace of this gateway (the managed-by tag), in any state, newest first:
        the newest sandbox of each workspace id, its tags from the list answer itself."""
        async with modal_errors("list"):
            app_id = await self._app_id()
            latest: dict[str, SandboxInfo] = {}
            async for info in list_sandboxes(app_id, {TAG_MANAGED_BY: MANAGED_BY}):
                workspace_id = info.tags.get(TAG_WORKSPACE_ID, "")
                if workspace_id and workspace_id not in latest:
                    latest[workspace_id] = info
            out = []
            for workspace_id, info in latest.items():
                if records.TAG_PURGED in info.tags:
                    continue
                current = Current(workspace_id, None, dict(info.tags), info.result, info)
                with contextlib.suppress(modal.exception.Error):
                    current = await self._observe(current)
                out.append(self._record(current))
            # Workspaces whose sandboxes Modal no longer lists: their records are the store's.
            for workspace_id in await self._records.workspace_ids():
                if workspace_id in latest:
                    continue
                stored = await self._records.load(workspace_id)
                if stored is not None and records.TAG_PURGED not in stored.tags:
                    out.append(self._record(Current(workspace_id, None, stored.tags, UNLISTED_END)))
        return out

    async def set_tags(self, workspace_id: str, tags: dict[str, str]) -> WorkspaceRecord:
        """Replace the caller's tags; the managed ones and the driver's records are kept."""
        workspace_id = checked_workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._running(workspace_id)

            def with_callers(held: dict[str, str]) -> dict[str, str]:
                kept = {
                    k: v
                    for k, v in held.items()
                    if k in WORKSPACE_TAGS or k.startswith(records.INTERNAL_PREFIX)
                }
                return {**_caller_tags(tags, kept), **kept}

            merged = await self._save(current, with_callers)
        return self._record(replace(current, tags=merged))

    # -- the channel --------------------------------------------------------------------------

    async def open_channel(self, workspace_id: str) -> ExecChannel:
        """One exec of the agent's `connect` mode, as a byte stream both ways."""
        workspace_id = checked_workspace_id(workspace_id)
        argv = connect_argv(self.settings)
        process = None
        known = self._handles.get(workspace_id)
        if known is not None:
            try:
                process = await known.exec.aio(*argv, text=False)
            except Exception as exc:  # it ended since: the lookup below says how
                log.debug("the known sandbox of %s took no exec: %s", workspace_id, exc)
                self._handles.pop(workspace_id, None)
        if process is None:
            async with modal_errors(workspace_id):
                current = await self._running(workspace_id, tags=False)
                sandbox = await current.handle()
                process = await sandbox.exec.aio(*argv, text=False)
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
                    keepalive_seconds=self.keepalive_seconds,
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

    async def preview_url(self, workspace_id: str, port: int) -> str:
        """The public URL of the workspace's tunnel to `port` (one it declared at create)."""
        async with modal_errors(workspace_id):
            sandbox = await (await self._running(workspace_id)).handle()
            return await tunnel_url(sandbox, workspace_id, port)

    async def _drop_client(self, workspace_id: str) -> None:
        """Forgets the workspace's channel and its sandbox's handle (it is being ended or
        replaced)."""
        self._handles.pop(workspace_id, None)
        self._made.pop(workspace_id, None)
        self._looked_up(None, workspace_id)
        client = self._clients.pop(workspace_id, None)
        if client is not None:
            await client.close()

    # -- ending -------------------------------------------------------------------------------

    async def destroy(self, workspace_id: str, *, keep_snapshots: bool = False) -> None:
        """Terminate the sandbox. With `keep_snapshots` the workspace reads as terminated and
        can be resumed from its snapshots; without, its snapshot images are deleted and it
        reads as never made. The record is written before the sandbox is ended, so its end is
        never mistaken for one the gateway did not ask for."""
        workspace_id = checked_workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._current(workspace_id)
            if keep_snapshots:

                def ended(held: dict[str, str]) -> dict[str, str]:
                    if records.TAG_ENDED in held:
                        raise NotFoundError(
                            "not_found", f"workspace {workspace_id} was terminated", "workspace_id"
                        )
                    held.pop(records.TAG_SUSPENSION, None)
                    return {**held, records.TAG_ENDED: utc_now()}

                await self._save(current, ended)
            else:
                tags = dict(current.tags)
                for stored in records.snapshots(workspace_id, tags):
                    await delete_image(stored.image_id)
                # Nothing can resume it any more: its secret_env goes with its images.
                own = records.secret_env(tags)
                if own is not None:
                    await delete_secret_env(own)
                purged = {
                    **{k: v for k, v in tags.items() if not k.startswith(records.INTERNAL_PREFIX)},
                    records.TAG_PURGED: utc_now(),
                }
                # The sandbox's copy says purged (the list skips it), and the records go.
                if current.sandbox is not None or current.info is not None:
                    sandbox = await current.handle()
                    await sandbox.set_tags.aio(purged)
                await self._records.forget(workspace_id)
            if current.running:
                sandbox = await current.handle()
                await sandbox.terminate.aio()
        await self._drop_client(workspace_id)

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
        for client in list(self._clients.values()):
            await client.close()
        self._clients.clear()
        for channel in list(self._channels):
            await channel.close()
        self._channels.clear()
