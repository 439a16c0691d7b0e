"""The `ModalClient` service of the test control plane: auth, apps and the sandbox calls (V2 and
V1) that the Modal SDK makes for create, lookup, list, tags, wait and terminate (images, secrets and
mounts are in `objects`, volumes in `volumes`). Every other call fails loudly as UNIMPLEMENTED.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import Any

from google.protobuf import empty_pb2
from grpclib import GRPCError, Status
from modal_proto import api_grpc, api_pb2

from .functions import FunctionsServicer
from .objects import ObjectsServicer, request_of
from .sandboxes import (
    SandboxRecord,
    copy_filesystem,
    v1_id,
    v1_task_id,
    v2_sandbox_id,
    v2_task_id,
)
from .servicing import serviced
from .state import ImageRecord, State
from .volumes import VolumesServicer

# How many sandboxes one page of SandboxList carries.
LIST_PAGE_SIZE = 50
_CREATE_IF_MISSING = api_pb2.OBJECT_CREATION_TYPE_CREATE_IF_MISSING
_request = request_of


def _handle_metadata(record: SandboxRecord) -> api_pb2.SandboxHandleMetadata:
    metadata = api_pb2.SandboxHandleMetadata(app_id=record.app_id)
    if record.result is not None:
        metadata.result.CopyFrom(record.result)
    return metadata


@serviced
class ModalClientServicer(
    ObjectsServicer, VolumesServicer, FunctionsServicer, api_grpc.ModalClientBase
):
    def __init__(self, state: State) -> None:
        self.state = state

    # -- client, auth, environment, apps ------------------------------------------------------

    async def ClientHello(self, stream: Any) -> None:
        await _request(self.state, stream)
        await stream.send_message(api_pb2.ClientHelloResponse())

    async def AuthTokenGet(self, stream: Any) -> None:
        await _request(self.state, stream)
        await stream.send_message(api_pb2.AuthTokenGetResponse(token=self.state.issue_auth_token()))

    async def AppGetOrCreate(self, stream: Any) -> None:
        request = await _request(self.state, stream)
        create = request.object_creation_type == _CREATE_IF_MISSING
        app_id = self.state.app_id(request.environment_name, request.app_name, create)
        await stream.send_message(
            api_pb2.AppGetOrCreateResponse(
                app_id=app_id,
                handle_metadata=self.app_metadata(
                    request.environment_name, request.app_name, app_id
                ),
            )
        )

    # -- sandbox create -----------------------------------------------------------------------

    def _secret_env(self, secret_ids: Any, sources: Any) -> dict[str, str]:
        env: dict[str, str] = {}
        for secret_id in secret_ids:
            env.update(self.state.secret_ids.get(secret_id, {}))
        for source in sources:
            if source.secret_id:
                env.update(self.state.secret_ids.get(source.secret_id, {}))
            else:
                env.update(source.env.contents)
        return env

    async def _create(
        self, version: int, app_id: str, definition: api_pb2.Sandbox, tags: Any, env: dict[str, str]
    ) -> SandboxRecord:
        if not app_id:
            raise GRPCError(Status.INVALID_ARGUMENT, "app_id is required")
        if definition.name and self.state.running_by_name(app_id, definition.name):
            raise GRPCError(
                Status.ALREADY_EXISTS, f"A sandbox named '{definition.name}' is already running"
            )
        image = self.state.image(definition.image_id) if definition.image_id else None
        if definition.image_id and image is None:
            raise self.state.image_missing(definition.image_id)
        sandbox_id = v2_sandbox_id() if version == 2 else v1_id("sb")
        record = SandboxRecord(
            sandbox_id=sandbox_id,
            task_id=v2_task_id() if version == 2 else v1_task_id(),
            version=version,
            app_id=app_id,
            name=definition.name,
            tags={t.tag_name: t.tag_value for t in tags},
            definition=definition,
            env=env,
            # Short: unix sockets under it must fit in 108 bytes.
            directory=self.state.root / sandbox_id[-12:],
            mapped_prefixes=self.state.mapped_prefixes,
            sandbox_token=secrets.token_hex(16) if version == 2 else "",
            bwrap=self.state.bwrap,
            on_exit=self._take_exit_snapshot,
        )
        record.prepare(image.snapshot if image else None)
        self.state.sandboxes[sandbox_id] = record
        if self.state.start_delay > 0:
            record.starting = True
            record._watchers.append(asyncio.create_task(self._start_later(record)))
        else:
            await record.start()
        return record

    async def _start_later(self, record: SandboxRecord) -> None:
        await asyncio.sleep(self.state.start_delay)
        await record.start()
        record.starting = False

    async def SandboxCreateV2(self, stream: Any) -> None:
        request = await _request(self.state, stream, auth_token=True)
        env = self._secret_env(request.definition.secret_ids, request.secret_sources)
        record = await self._create(2, request.app_id, request.definition, request.tags, env)
        await stream.send_message(
            api_pb2.SandboxCreateV2Response(
                sandbox_id=record.sandbox_id,
                task_id="" if record.starting else record.task_id,
                metadata=_handle_metadata(record),
                sandbox_token=record.sandbox_token,
                command_router_access=self._router_access(record),
            )
        )

    async def SandboxCreate(self, stream: Any) -> None:
        request = await _request(self.state, stream)
        env = self._secret_env(request.definition.secret_ids, [])
        record = await self._create(1, request.app_id, request.definition, request.tags, env)
        await stream.send_message(
            api_pb2.SandboxCreateResponse(
                sandbox_id=record.sandbox_id, metadata=_handle_metadata(record)
            )
        )

    # -- exit snapshots -----------------------------------------------------------------------

    def _take_exit_snapshot(self, record: SandboxRecord) -> None:
        """The sandbox's files as they were when it ended, as an image (Modal's exit snapshot:
        kept by Modal, no TTL of the caller's)."""
        image_id = "im-" + secrets.token_hex(11)
        target = self.state.root / "images" / image_id
        try:
            copy_filesystem(record.directory, target)
        except OSError as exc:
            record.exit_error = f"the filesystem could not be read: {exc}"
            return
        self.state.images[image_id] = ImageRecord(image_id, snapshot=target)
        record.exit_image_id = image_id

    async def _exit_snapshot(self, stream: Any, auth_token: bool) -> None:
        request = await _request(self.state, stream, auth_token=auth_token)
        record = self.state.sandbox(request.sandbox_id)
        if not record.exit_snapshot_enabled:
            raise GRPCError(
                Status.INVALID_ARGUMENT, "exit snapshot is not enabled for this Sandbox"
            )
        if request.timeout > 0 and record.running:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(record.finished.wait(), request.timeout)
        response = api_pb2.SandboxGetExitSnapshotResponse()
        if record.running:
            response.pending.SetInParent()
        elif record.exit_image_id is not None:
            response.success.image_id = record.exit_image_id
        else:
            response.error.error_code = (
                api_pb2.SandboxGetExitSnapshotResponse.ERROR_CODE_FILESYSTEM_INCONSISTENT
            )
            response.error.message = record.exit_error or "no exit snapshot was taken"
        await stream.send_message(response)

    async def SandboxGetExitSnapshotV2(self, stream: Any) -> None:
        await self._exit_snapshot(stream, auth_token=True)

    async def SandboxGetExitSnapshot(self, stream: Any) -> None:
        await self._exit_snapshot(stream, auth_token=False)

    # -- logs -----------------------------------------------------------------------------------

    async def AppFetchLogs(self, stream: Any) -> None:
        """The entrypoint's output of one sandbox (by task or sandbox id), one item per line,
        the last `limit` of them: what `sandbox.logs.tail()` reads after the sandbox ended."""
        request = await _request(self.state, stream)
        response = api_pb2.AppFetchLogsResponse()
        for record in self.state.sandboxes.values():
            if request.task_id not in ("", record.task_id) or request.sandbox_id not in (
                "",
                record.sandbox_id,
            ):
                continue
            if record.entrypoint is None:
                continue
            stderr = request.source == api_pb2.FILE_DESCRIPTOR_STDERR
            buffer = record.entrypoint.stderr if stderr else record.entrypoint.stdout
            lines = bytes(buffer.data).decode(errors="replace").splitlines(keepends=True)
            if request.limit:
                lines = lines[-request.limit :]
            batch = response.batches.add(task_id=record.task_id, sandbox_id=record.sandbox_id)
            for line in lines:
                batch.items.add(
                    data=line,
                    file_descriptor=request.source or api_pb2.FILE_DESCRIPTOR_STDOUT,
                    timestamp=record.finished_at or record.created_at,
                )
        await stream.send_message(response)

    # -- task and router access ---------------------------------------------------------------

    def _router_access(self, record: SandboxRecord) -> api_pb2.CommandRouterAccess:
        return api_pb2.CommandRouterAccess(
            url=self.state.router_url, jwt=self.state.router_token(record.task_id)
        )

    async def _task_id(self, stream: Any, auth_token: bool) -> None:
        request = await _request(self.state, stream, auth_token=auth_token)
        record = self.state.sandbox(request.sandbox_id)
        # An ended sandbox still names its task (its logs are found by it), with its result;
        # one still starting has none yet (the SDK asks again).
        task_id = "" if record.starting else record.task_id
        response = api_pb2.SandboxGetTaskIdResponse(task_id=task_id)
        if not record.running:
            assert record.result is not None
            response.task_result.CopyFrom(record.result)
        await stream.send_message(response)

    async def SandboxGetTaskIdV2(self, stream: Any) -> None:
        await self._task_id(stream, auth_token=True)

    async def SandboxGetTaskId(self, stream: Any) -> None:
        await self._task_id(stream, auth_token=False)

    async def _access(self, record: SandboxRecord) -> api_pb2.CommandRouterAccess:
        if record.starting:
            raise GRPCError(Status.FAILED_PRECONDITION, f"Sandbox {record.sandbox_id} is starting")
        if not record.running:
            raise GRPCError(Status.FAILED_PRECONDITION, f"Sandbox {record.sandbox_id} has finished")
        return self._router_access(record)

    async def SandboxGetCommandRouterAccess(self, stream: Any) -> None:
        request = await _request(self.state, stream, auth_token=True)
        if request.sandbox_id:
            record = self.state.sandbox(request.sandbox_id)
        else:
            record = self.state.sandbox_by_task(request.task_id)
        access = await self._access(record)
        await stream.send_message(
            api_pb2.SandboxGetCommandRouterAccessResponse(jwt=access.jwt, url=access.url)
        )

    async def TaskGetCommandRouterAccess(self, stream: Any) -> None:
        request = await _request(self.state, stream)
        access = await self._access(self.state.sandbox_by_task(request.task_id))
        await stream.send_message(
            api_pb2.TaskGetCommandRouterAccessResponse(jwt=access.jwt, url=access.url)
        )

    # -- tunnels --------------------------------------------------------------------------------

    async def _tunnels(self, stream: Any, auth_token: bool) -> None:
        """The tunnels of the ports the sandbox's definition opened (`encrypted_ports`, fixed at
        create): one TLS endpoint each, on port 443 of a host of its own; an ended sandbox has
        none."""
        request = await _request(self.state, stream, auth_token=auth_token)
        record = self.state.sandbox(request.sandbox_id)
        if not record.running:
            status = api_pb2.GenericResult.GENERIC_STATUS_TERMINATED
            await stream.send_message(
                api_pb2.SandboxGetTunnelsResponse(result=api_pb2.GenericResult(status=status))
            )
            return
        response = api_pb2.SandboxGetTunnelsResponse(
            result=api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_SUCCESS)
        )
        for spec in record.definition.open_ports.ports:
            host = f"{record.sandbox_id[-10:].lower()}-{spec.port}.tunnel.modal.test"
            tunnel = api_pb2.TunnelData(host=host, port=443, container_port=spec.port)
            if spec.unencrypted:
                tunnel.unencrypted_host = "r." + host
                tunnel.unencrypted_port = 40000 + spec.port % 10000
            response.tunnels.append(tunnel)
        await stream.send_message(response)

    async def SandboxGetTunnelsV2(self, stream: Any) -> None:
        await self._tunnels(stream, auth_token=True)

    async def SandboxGetTunnels(self, stream: Any) -> None:
        await self._tunnels(stream, auth_token=False)

    # -- wait, lookup, list, tags, terminate --------------------------------------------------

    async def _wait(self, stream: Any, auth_token: bool) -> None:
        request = await _request(self.state, stream, auth_token=auth_token)
        record = self.state.sandbox(request.sandbox_id)
        if request.timeout > 0:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(record.finished.wait(), request.timeout)
        await stream.send_message(
            api_pb2.SandboxWaitResponse(
                result=record.result or api_pb2.GenericResult(), metadata=_handle_metadata(record)
            )
        )

    async def SandboxWaitV2(self, stream: Any) -> None:
        await self._wait(stream, auth_token=True)

    async def SandboxWait(self, stream: Any) -> None:
        await self._wait(stream, auth_token=False)

    async def _from_name(self, stream: Any, version: int, auth_token: bool) -> None:
        request = await _request(self.state, stream, auth_token=auth_token)
        app_id = self.state.app_id_by_name(request.environment_name, request.app_name)
        found = None
        if app_id is not None:
            matches = [
                r
                for r in self.state.sandboxes.values()
                if r.app_id == app_id
                and r.name == request.sandbox_name
                and r.version == version
                and not r.forgotten
            ]
            running = [r for r in matches if r.running]
            found = running[-1] if running else None
            if found is None and request.include_terminated and matches:
                found = max(matches, key=lambda r: r.created_at)
        if found is None:
            raise GRPCError(
                Status.NOT_FOUND,
                f"Sandbox '{request.sandbox_name}' not found in app '{request.app_name}'",
            )
        await stream.send_message(
            api_pb2.SandboxGetFromNameResponse(
                sandbox_id=found.sandbox_id, metadata=_handle_metadata(found)
            )
        )

    async def SandboxGetFromNameV2(self, stream: Any) -> None:
        await self._from_name(stream, 2, auth_token=True)

    async def SandboxGetFromName(self, stream: Any) -> None:
        await self._from_name(stream, 1, auth_token=False)

    async def _list(self, stream: Any, versions: tuple[int, ...], auth_token: bool) -> None:
        request = await _request(self.state, stream, auth_token=auth_token)
        wanted = {t.tag_name: t.tag_value for t in request.tags}
        records = sorted(
            (
                r
                for r in self.state.sandboxes.values()
                if r.version in versions
                and not r.forgotten
                and (not request.app_id or r.app_id == request.app_id)
                and (request.include_finished or r.running)
                and all(r.tags.get(k) == v for k, v in wanted.items())
                and (not request.before_timestamp or r.created_at < request.before_timestamp)
            ),
            key=lambda r: r.created_at,
            reverse=True,
        )
        response = api_pb2.SandboxListResponse()
        for record in records[:LIST_PAGE_SIZE]:
            info = response.sandboxes.add(
                id=record.sandbox_id,
                created_at=record.created_at,
                app_id=record.app_id,
                name=record.name,
                image_id=record.definition.image_id,
                timeout_secs=record.definition.timeout_secs,
                idle_timeout_secs=record.definition.idle_timeout_secs,
            )
            info.tags.extend(
                api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in record.tags.items()
            )
            info.task_info.id = record.task_id
            info.task_info.sandbox_id = record.sandbox_id
            info.task_info.finished_at = record.finished_at
            if record.result is not None:
                info.task_info.result.CopyFrom(record.result)
            info.metadata.CopyFrom(_handle_metadata(record))
        await stream.send_message(response)

    async def SandboxListV2(self, stream: Any) -> None:
        # The V2 list covers both kinds, as the SDK says of it.
        await self._list(stream, (1, 2), auth_token=True)

    async def SandboxList(self, stream: Any) -> None:
        await self._list(stream, (1,), auth_token=False)

    async def _tags_get(self, stream: Any, auth_token: bool) -> None:
        request = await _request(self.state, stream, auth_token=auth_token)
        record = self.state.sandbox(request.sandbox_id)
        await stream.send_message(
            api_pb2.SandboxTagsGetResponse(
                tags=[api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in record.tags.items()]
            )
        )

    async def SandboxTagsGetV2(self, stream: Any) -> None:
        await self._tags_get(stream, auth_token=True)

    async def SandboxTagsGet(self, stream: Any) -> None:
        await self._tags_get(stream, auth_token=False)

    async def _tags_set(self, stream: Any, auth_token: bool) -> None:
        request = await _request(self.state, stream, auth_token=auth_token)
        record = self.state.sandbox(request.sandbox_id)
        record.tags = {t.tag_name: t.tag_value for t in request.tags}
        await stream.send_message(empty_pb2.Empty())

    async def SandboxTagsSetV2(self, stream: Any) -> None:
        await self._tags_set(stream, auth_token=True)

    async def SandboxTagsSet(self, stream: Any) -> None:
        await self._tags_set(stream, auth_token=False)

    async def _terminate(self, stream: Any, auth_token: bool) -> None:
        request = await _request(self.state, stream, auth_token=auth_token)
        record = self.state.sandbox(request.sandbox_id)
        existing = record.result
        record.finish(
            api_pb2.GenericResult(
                status=api_pb2.GenericResult.GENERIC_STATUS_TERMINATED,
                exception="Sandbox terminated",
            )
        )
        response = api_pb2.SandboxTerminateResponse()
        if existing is not None:
            response.existing_result.CopyFrom(existing)
        await stream.send_message(response)

    async def SandboxStdinWrite(self, stream: Any) -> None:
        """The entrypoint's stdin on a V1 sandbox: numbered writes (a retried index is skipped,
        as the server does), where V2 writes at byte offsets through the task's router."""
        request = await _request(self.state, stream, auth_token=False)
        record = self.state.sandbox(request.sandbox_id)
        if record.entrypoint is None:
            raise GRPCError(Status.NOT_FOUND, "sandbox has no entrypoint")
        entrypoint = record.entrypoint
        if request.index > record.stdin_index:
            record.stdin_index = request.index
            record.touch()
            await entrypoint.write_stdin(entrypoint.stdin_written, request.input, request.eof)
        await stream.send_message(api_pb2.SandboxStdinWriteResponse())

    async def SandboxTerminateV2(self, stream: Any) -> None:
        await self._terminate(stream, auth_token=True)

    async def SandboxTerminate(self, stream: Any) -> None:
        await self._terminate(stream, auth_token=False)
