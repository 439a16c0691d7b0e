"""The Modal driver: each workspace is one Modal Sandbox at a time, named after the workspace id
in one sandbox app, tagged with the managed tags, running the workspace agent as its entrypoint.

A running workspace is found with `Sandbox.from_name` (never by listing per request) and
reached through the agent channel (`modal_channel`): one exec of the agent's `connect` mode,
after which starting, polling, input and cancel cost no further Modal calls. A workspace whose
sandbox has ended (suspended, or terminated and kept) is found through the list call, which
carries the tags that hold its records (`records`). Every SDK call is an `.aio` call.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

import modal
import modal.exception
from modal_proto import api_pb2

from ..._core import PolicyError
from ...errors import (
    ConflictError,
    InvalidArgumentError,
    NotFoundError,
    UpstreamError,
)
from ...policy import WORKSPACE_ROOT, WORKSPACE_TAGS, check_id, stored_tag
from ..base import (
    LifecycleNote,
    Lineage,
    Progress,
    SnapshotRecord,
    SnapshotSpec,
    SuspendReason,
    Suspension,
    WorkspaceRecord,
    WorkspaceSpec,
    utc_now,
)
from . import records
from .channel import ChannelClient, ExecChannel
from .channel_key import channel_key, resolve_channel_secret
from .config import (
    SECRETS_SETTING,
    ModalSecrets,
    ModalSettings,
    SandboxOptions,
    check_env,
    sandbox_options,
)
from .exits import end_reason, entrypoint_stderr, exit_snapshot_image
from .launch import Launch, start_sandbox
from .lookup import SandboxInfo, latest_sandbox, list_sandboxes
from .modal_errors import missing_objects, modal_errors
from .secret_env import delete_secret_env, make_secret_env
from .snapshots import delete_image, open_image, take_filesystem_snapshot

if TYPE_CHECKING:
    from ...channel.client import AgentClient
    from ...config import Settings

__all__ = ["ModalDriver", "ModalSettings"]

log = logging.getLogger(__name__)

MANAGED_BY = "modal-workspace-mcp"
# The tags only the driver writes (their names live in the core's policy): a caller's tags can
# never replace them.
TAG_MANAGED_BY, TAG_WORKSPACE_ID, TAG_WORKSPACE_ROOT, TAG_CREATED_AT = WORKSPACE_TAGS
# What a fork does not take over of its parent's recorded resources: secrets are asked for
# anew, the network rule is the spec's, the image is the snapshot's.
_NOT_INHERITED = ("secret_names", "block_network", "image_id", "image_name")


def _workspace_id(workspace_id: str) -> str:
    try:
        return check_id("ws", workspace_id)
    except PolicyError as exc:
        raise InvalidArgumentError(
            "invalid_argument", f"workspace_id: {exc}", "workspace_id"
        ) from None


def _caller_tags(tags: Mapping[str, str], managed: Mapping[str, str]) -> dict[str, str]:
    """The caller's tags, refused where a key is malformed, is one of the driver's records, or
    would change a managed tag (the core's `stored_tag` rule)."""
    out: dict[str, str] = {}
    for key, value in tags.items():
        try:
            stored_tag(key, value, managed.get(key))
        except PolicyError as exc:
            field = f"tags.{key[:32]}"
            raise InvalidArgumentError("invalid_argument", f"{field}: {exc}", field) from None
        out[key] = value
    return out


def _stamp(seconds: float) -> str:
    at = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class _Current:
    """A workspace's latest sandbox: a handle when one was needed, its tags, and its result
    (None while it runs)."""

    workspace_id: str
    sandbox: modal.Sandbox | None
    tags: dict[str, str]
    result: api_pb2.GenericResult | None
    info: SandboxInfo | None = None

    @property
    def running(self) -> bool:
        return self.result is None

    async def handle(self) -> modal.Sandbox:
        if self.sandbox is None:
            assert self.info is not None
            self.sandbox = await self.info.handle()
        return self.sandbox


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

    async def _app_id(self) -> str:
        return str((await self._sandbox_app()).app_id)

    async def _current(self, workspace_id: str, *, tags: bool = True) -> _Current:
        """The workspace's latest sandbox: the running one by name (one call, and one for its
        tags when asked), else the newest ended one from the list (which carries its tags).
        A workspace never made, or purged, is not found."""
        try:
            sandbox = await modal.Sandbox.from_name.aio(self.settings.app_name, workspace_id)
        except modal.exception.NotFoundError:
            sandbox = None
        if sandbox is not None and sandbox.returncode is None:
            found = await sandbox.get_tags.aio() if tags else {}
            return _Current(workspace_id, sandbox, found, None)
        wanted = {TAG_MANAGED_BY: MANAGED_BY, TAG_WORKSPACE_ID: workspace_id}
        info = await latest_sandbox(await self._app_id(), wanted)
        if info is None or records.TAG_PURGED in info.tags:
            raise NotFoundError(
                "not_found", f"workspace {workspace_id} does not exist", "workspace_id"
            )
        return _Current(workspace_id, None, dict(info.tags), info.result, info)

    async def _running(self, workspace_id: str, *, tags: bool = True) -> _Current:
        """The workspace's running sandbox; an ended one is refused as the local driver refuses
        it (terminated: not found; suspended: resume it first)."""
        current = await self._current(workspace_id, tags=tags)
        if current.running:
            return current
        if records.TAG_ENDED in current.tags:
            raise NotFoundError(
                "not_found", f"workspace {workspace_id} was terminated", "workspace_id"
            )
        raise ConflictError(
            "conflict", f"workspace {workspace_id} is suspended; resume it first", "workspace_id"
        )

    async def _observe(self, current: _Current) -> _Current:
        """Records what an ended sandbox left, once: its exit snapshot (kind `exit`) and the
        suspension saying why it ended. One that the gateway ended itself (suspend, terminate)
        was recorded before it was ended; an exit snapshot still being made is recorded the
        next time the workspace is looked at."""
        tags = current.tags
        done = (records.TAG_ENDED, records.TAG_SUSPENSION, records.TAG_PURGED)
        if current.running or current.result is None or any(t in tags for t in done):
            return current
        sandbox = await current.handle()
        reason = end_reason(current.result)
        try:
            image_id, why = await exit_snapshot_image(sandbox)
        except TimeoutError:
            log.info("the exit snapshot of %s is not ready yet", current.workspace_id)
            return current
        tags = dict(tags)
        snapshot_id = None
        if image_id is not None:
            spec = SnapshotSpec(
                snapshot_id=records.exit_snapshot_id(sandbox.object_id),
                kind="exit",
                label=f"exit: {reason}",
            )
            stored = records.StoredSnapshot.new(current.workspace_id, spec, image_id, tags)
            tags = records.with_snapshot(tags, stored, automatic=True)
            snapshot_id = spec.snapshot_id
        detail = why
        if reason == "failed_to_start":
            detail = await entrypoint_stderr(sandbox, current.result)
        suspension = Suspension(
            reason=reason, at=self._ended_at(current), snapshot_id=snapshot_id, detail=detail
        )
        tags[records.TAG_SUSPENSION] = records.suspension_value(suspension)
        await sandbox.set_tags.aio(tags)
        log.info(
            "workspace %s ended (%s); its exit snapshot is %s",
            current.workspace_id,
            reason,
            snapshot_id or f"missing ({why})",
        )
        return replace(current, tags=tags)

    @staticmethod
    def _ended_at(current: _Current) -> str:
        finished = current.info.finished_at if current.info is not None else 0.0
        return _stamp(finished) if finished else utc_now()

    def _record(self, current: _Current) -> WorkspaceRecord:
        tags = current.tags
        resources = records.resources(tags)
        suspension = records.suspension(tags)
        if current.running:
            state = "running"
            suspension = None
        elif records.TAG_ENDED in tags:
            state = "terminated"
            suspension = None
        else:
            state = "suspended"
            if suspension is None:
                # Its exit snapshot is still being made: recorded at the next look.
                assert current.result is not None
                suspension = Suspension(reason=end_reason(current.result), at=utc_now())
        return WorkspaceRecord(
            workspace_id=current.workspace_id,
            driver=self.name,
            root=tags.get(TAG_WORKSPACE_ROOT, WORKSPACE_ROOT),
            created_at=tags.get(TAG_CREATED_AT, ""),
            tags=records.caller_tags(tags),
            state=state,  # type: ignore[arg-type]
            resources=resources,
            block_network=bool(resources.get("block_network", False)),
            lineage=records.lineage(tags),
            suspension=suspension,
            started_at=tags.get(records.TAG_STARTED) or tags.get(TAG_CREATED_AT) or None,
            ended_at=tags.get(records.TAG_ENDED),
            lifecycle=records.notes(tags),
        )

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
        workspace_id = _workspace_id(workspace_id)
        options = sandbox_options(spec.resources, self.settings)
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
        )
        async with modal_errors(workspace_id), missing_objects():
            app = await self._sandbox_app()
            if spec.secret_env:
                # A Secret of the workspace's own (a fork makes its own from its own spec), so
                # that a resume attaches the same values by id.
                launch.secret_env = await make_secret_env(str(app.app_id), spec.secret_env)
                tags[records.TAG_SECRET_ENV] = launch.secret_env.value()
            try:
                await start_sandbox(app, self.settings, launch, self._channel_key(workspace_id))
            except BaseException:
                # No workspace holds it: its values are not left at Modal.
                if launch.secret_env is not None:
                    await delete_secret_env(launch.secret_env)
                raise
        return self._record(_Current(workspace_id, None, tags, None))

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
                current = _Current(workspace_id, None, dict(info.tags), info.result, info)
                with contextlib.suppress(modal.exception.Error):
                    current = await self._observe(current)
                out.append(self._record(current))
        return out

    async def set_tags(self, workspace_id: str, tags: dict[str, str]) -> WorkspaceRecord:
        """Replace the caller's tags; the managed ones and the driver's records are kept."""
        workspace_id = _workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._running(workspace_id)
            kept = {
                k: v
                for k, v in current.tags.items()
                if k in WORKSPACE_TAGS or k.startswith(records.INTERNAL_PREFIX)
            }
            merged = {**_caller_tags(tags, kept), **kept}
            sandbox = await current.handle()
            await sandbox.set_tags.aio(merged)
        return self._record(replace(current, tags=merged))

    async def note(self, workspace_id: str, note: LifecycleNote) -> None:
        workspace_id = _workspace_id(workspace_id)
        with contextlib.suppress(NotFoundError):
            async with modal_errors(workspace_id):
                current = await self._current(workspace_id)
                sandbox = await current.handle()
                await sandbox.set_tags.aio(records.with_note(current.tags, note))

    # -- the channel --------------------------------------------------------------------------

    async def open_channel(self, workspace_id: str) -> ExecChannel:
        """One exec of the agent's `connect` mode, as a byte stream both ways."""
        workspace_id = _workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._running(workspace_id, tags=False)
            sandbox = await current.handle()
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

    async def _drop_client(self, workspace_id: str) -> None:
        client = self._clients.pop(workspace_id, None)
        if client is not None:
            await client.close()

    # -- ending -------------------------------------------------------------------------------

    async def destroy(self, workspace_id: str, *, keep_snapshots: bool = False) -> None:
        """Terminate the sandbox. With `keep_snapshots` the workspace reads as terminated and
        can be resumed from its snapshots; without, its snapshot images are deleted and it
        reads as never made. The record is written before the sandbox is ended, so its end is
        never mistaken for one the gateway did not ask for."""
        workspace_id = _workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._current(workspace_id)
            tags = dict(current.tags)
            if keep_snapshots:
                if records.TAG_ENDED in tags:
                    raise NotFoundError(
                        "not_found", f"workspace {workspace_id} was terminated", "workspace_id"
                    )
                tags.pop(records.TAG_SUSPENSION, None)
                tags[records.TAG_ENDED] = utc_now()
            else:
                for stored in records.snapshots(workspace_id, tags):
                    await delete_image(stored.image_id)
                # Nothing can resume it any more: its secret_env goes with its images.
                own = records.secret_env(tags)
                if own is not None:
                    await delete_secret_env(own)
                tags = {
                    **{k: v for k, v in tags.items() if not k.startswith(records.INTERNAL_PREFIX)},
                    records.TAG_PURGED: utc_now(),
                }
            sandbox = await current.handle()
            await sandbox.set_tags.aio(tags)
            if current.running:
                await sandbox.terminate.aio()
        await self._drop_client(workspace_id)

    async def suspend(
        self, workspace_id: str, reason: SuspendReason, snapshot_id: str | None
    ) -> WorkspaceRecord:
        """Ends the sandbox (the service has taken the snapshot it names) and records why."""
        workspace_id = _workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._running(workspace_id)
            suspension = Suspension(reason=reason, at=utc_now(), snapshot_id=snapshot_id)
            tags = {**current.tags, records.TAG_SUSPENSION: records.suspension_value(suspension)}
            sandbox = await current.handle()
            await sandbox.set_tags.aio(tags)
            await sandbox.terminate.aio()
        await self._drop_client(workspace_id)
        return self._record(replace(current, tags=tags, result=_TERMINATED))

    async def close(self) -> None:
        for client in list(self._clients.values()):
            await client.close()
        self._clients.clear()
        for channel in list(self._channels):
            await channel.close()
        self._channels.clear()

    # -- snapshots ----------------------------------------------------------------------------

    async def snapshot(
        self, workspace_id: str, spec: SnapshotSpec, progress: Progress | None = None
    ) -> SnapshotRecord:
        """A filesystem snapshot of the running sandbox, recorded once Modal can open it."""
        workspace_id = _workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._running(workspace_id)
            if records.has_snapshot(current.tags, spec.snapshot_id):
                raise ConflictError(
                    "conflict", f"snapshot {spec.snapshot_id} already exists", "snapshot_id"
                )
            # Refused before anything is made: a snapshot beyond the bound would not be kept.
            probe = records.StoredSnapshot.new(workspace_id, spec, "im-probe", current.tags)
            records.with_snapshot(current.tags, probe)
            if progress is not None:
                await progress(0, None)  # Modal reports no progress of its own
            sandbox = await current.handle()
            image_id = await take_filesystem_snapshot(
                sandbox,
                workspace_id,
                spec.snapshot_id,
                ttl_seconds=spec.ttl_seconds,
                timeout=self.settings.snapshot_timeout_seconds,
            )
            await open_image(spec.snapshot_id, image_id)
            # Read again: the tags may have changed while the snapshot was taken.
            tags = await sandbox.get_tags.aio()
            stored = records.StoredSnapshot.new(workspace_id, spec, image_id, tags)
            await sandbox.set_tags.aio(records.with_snapshot(tags, stored))
        return stored.record

    async def list_snapshots(self, workspace_id: str) -> builtins.list[SnapshotRecord]:
        workspace_id = _workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._observe(await self._current(workspace_id))
        return [s.record for s in records.snapshots(workspace_id, current.tags)]

    async def _stored(self, current: _Current, snapshot_id: str) -> records.StoredSnapshot:
        for stored in records.snapshots(current.workspace_id, current.tags):
            if stored.record.snapshot_id == snapshot_id:
                return stored
        raise NotFoundError(
            "not_found",
            f"snapshot {snapshot_id} of workspace {current.workspace_id} does not exist "
            "(deleted, or never taken)",
            "snapshot_id",
        )

    async def delete_snapshot(self, workspace_id: str, snapshot_id: str) -> None:
        workspace_id = _workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._current(workspace_id)
            stored = await self._stored(current, snapshot_id)
            sandbox = await current.handle()
            await sandbox.set_tags.aio(records.without_snapshot(current.tags, snapshot_id))
            await delete_image(stored.image_id)

    # -- resume, fork -------------------------------------------------------------------------

    async def resume(self, workspace_id: str, snapshot: SnapshotRecord) -> WorkspaceRecord:
        """A new sandbox of the same name from the snapshot's image, with the snapshot's tags,
        the workspace's options and every record carried over. The agent's state dir is part of
        the snapshot: its exec history comes back, and the restarted daemon reports what was
        running as lost. The image is opened before anything is ended, so a snapshot that
        cannot be opened changes nothing."""
        workspace_id = _workspace_id(workspace_id)
        async with modal_errors(workspace_id):
            current = await self._current(workspace_id)
            stored = await self._stored(current, snapshot.snapshot_id)
            image = await open_image(snapshot.snapshot_id, stored.image_id)
            resources = records.resources(current.tags)
            options = sandbox_options(resources, self.settings)
            if current.running:
                await self._drop_client(workspace_id)
                sandbox = await current.handle()
                await sandbox.terminate.aio()
                with contextlib.suppress(modal.exception.Error, TimeoutError):
                    async with asyncio.timeout(60):
                        await sandbox.wait.aio(raise_on_termination=False)
            managed = {k: v for k, v in current.tags.items() if k in WORKSPACE_TAGS}
            kept = {
                k: v
                for k, v in records.internal_tags(current.tags).items()
                if k not in (records.TAG_SUSPENSION, records.TAG_ENDED)
            }
            restored = {
                k: v for k, v in records.caller_tags(snapshot.tags).items() if k not in managed
            }
            tags = {**restored, **managed, **kept, records.TAG_STARTED: utc_now()}
            launch = Launch(
                workspace_id=workspace_id,
                options=options,
                image=image,
                tags=tags,
                secret_names=list(resources.get("secret_names") or []),
                # The same Secret as before, by the id its record keeps: values never pass here.
                secret_env=records.secret_env(current.tags),
                block_network=bool(resources.get("block_network", False)),
            )
            app = await self._sandbox_app()
            async with missing_objects():
                await start_sandbox(app, self.settings, launch, self._channel_key(workspace_id))
        return self._record(_Current(workspace_id, None, tags, None))

    async def fork(
        self, snapshot: SnapshotRecord, workspace_id: str, spec: WorkspaceSpec, lineage: Lineage
    ) -> WorkspaceRecord:
        """A new workspace from the snapshot's image, its lineage recorded; its exec history
        starts empty (see `launch`)."""
        parent_id = _workspace_id(snapshot.workspace_id)
        async with modal_errors(parent_id):
            parent = await self._current(parent_id)
            stored = await self._stored(parent, snapshot.snapshot_id)
            image = await open_image(snapshot.snapshot_id, stored.image_id)
        resources = {k: v for k, v in spec.resources.items() if k not in _NOT_INHERITED}
        spec = spec.model_copy(update={"resources": resources})
        return await self._new_workspace(workspace_id, spec, image=image, lineage=lineage)


# What a sandbox the gateway has just terminated reads as until Modal says otherwise.
_TERMINATED = api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_TERMINATED)
