"""The task command router of the test control plane: exec start, stdio read, stdin write, wait,
poll, the entrypoint's stdio, and filesystem snapshots, each authorised by the router token that
the control plane handed out for that task. Every other call fails loudly as UNIMPLEMENTED.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from grpclib import GRPCError, Status
from modal_proto import api_pb2, task_command_router_grpc
from modal_proto import task_command_router_pb2 as sr_pb2

from . import tokens
from .processes import LocalProcess
from .sandboxes import SandboxRecord, copy_filesystem
from .servicing import serviced
from .state import ImageRecord, State

_TERMINATED = api_pb2.GenericResult.GENERIC_STATUS_TERMINATED

_STDERR_FDS = (
    sr_pb2.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR,
    sr_pb2.SANDBOX_STDIO_FILE_DESCRIPTOR_STDERR,
)


def _exit_status(process: LocalProcess, response: Any) -> Any:
    code = process.returncode
    if code is not None and code < 0:
        response.signal = -code
    elif code is not None:
        response.code = code
    return response


@serviced
class TaskCommandRouterServicer(task_command_router_grpc.TaskCommandRouterBase):
    def __init__(self, state: State) -> None:
        self.state = state

    async def _task(self, stream: Any) -> tuple[Any, SandboxRecord]:
        """The request and its sandbox, once the bearer token is shown to be for this task."""
        request = await stream.recv_message()
        header = str(stream.metadata.get("authorization", ""))
        claims = tokens.claims_of(header.removeprefix("Bearer "))
        if claims is None:
            raise GRPCError(Status.UNAUTHENTICATED, "missing, malformed or expired router token")
        if claims.get("task_id") != request.task_id:
            raise GRPCError(Status.PERMISSION_DENIED, "router token is for another task")
        return request, self.state.sandbox_by_task(request.task_id)

    @staticmethod
    def _exec(record: SandboxRecord, exec_id: str) -> LocalProcess:
        found = record.execs.get(exec_id)
        if found is None:
            raise GRPCError(Status.NOT_FOUND, f"exec {exec_id} not found")
        return found.process

    # -- exec --------------------------------------------------------------------------------

    async def TaskExecStart(self, stream: Any) -> None:
        request, record = await self._task(stream)
        if not record.running:
            raise GRPCError(Status.NOT_FOUND, f"task {request.task_id} has finished")
        if request.exec_id not in record.execs:
            env: dict[str, str] = {}
            for secret_id in request.secret_ids:
                env.update(self.state.secret_ids.get(secret_id, {}))
            for source in request.secret_sources:
                if source.secret_id:
                    env.update(self.state.secret_ids.get(source.secret_id, {}))
                else:
                    env.update(source.env.contents)
            env.update(request.env)
            await record.start_exec(
                request.exec_id,
                request.command_args,
                workdir=request.workdir if request.HasField("workdir") else None,
                env=env,
                timeout_secs=request.timeout_secs if request.HasField("timeout_secs") else None,
            )
        await stream.send_message(sr_pb2.TaskExecStartResponse())

    async def TaskExecStdioRead(self, stream: Any) -> None:
        request, record = await self._task(stream)
        process = self._exec(record, request.exec_id)
        buffer = process.stderr if request.file_descriptor in _STDERR_FDS else process.stdout
        async for chunk in buffer.read_from(request.offset):
            await stream.send_message(sr_pb2.TaskExecStdioReadResponse(data=chunk))

    async def TaskExecStdinWrite(self, stream: Any) -> None:
        request, record = await self._task(stream)
        process = self._exec(record, request.exec_id)
        record.touch()
        try:
            await process.write_stdin(request.offset, request.data, request.eof)
        except ValueError as exc:
            raise GRPCError(Status.OUT_OF_RANGE, str(exc)) from None
        await stream.send_message(sr_pb2.TaskExecStdinWriteResponse())

    async def TaskExecStdinStatus(self, stream: Any) -> None:
        request, record = await self._task(stream)
        process = self._exec(record, request.exec_id)
        await stream.send_message(
            sr_pb2.TaskExecStdinStatusResponse(
                num_bytes_written=process.stdin_written, closed=process.stdin_closed
            )
        )

    async def TaskExecWait(self, stream: Any) -> None:
        request, record = await self._task(stream)
        process = self._exec(record, request.exec_id)
        await process.wait()
        await stream.send_message(_exit_status(process, sr_pb2.TaskExecWaitResponse()))

    async def TaskExecPoll(self, stream: Any) -> None:
        request, record = await self._task(stream)
        process = self._exec(record, request.exec_id)
        await stream.send_message(_exit_status(process, sr_pb2.TaskExecPollResponse()))

    # -- the entrypoint's stdio --------------------------------------------------------------

    async def SandboxStdioReadV2(self, stream: Any) -> None:
        request, record = await self._task(stream)
        if record.entrypoint is None:
            raise GRPCError(Status.NOT_FOUND, "sandbox has no entrypoint")
        process = record.entrypoint
        buffer = process.stderr if request.file_descriptor in _STDERR_FDS else process.stdout
        offset = request.offset
        async for chunk in buffer.read_from(offset):
            await stream.send_message(
                sr_pb2.SandboxStdioReadV2Response(data=chunk, starting_offset=offset)
            )
            offset += len(chunk)

    async def SandboxStdinWriteV2(self, stream: Any) -> None:
        request, record = await self._task(stream)
        if record.entrypoint is None:
            raise GRPCError(Status.NOT_FOUND, "sandbox has no entrypoint")
        record.touch()
        await record.entrypoint.write_stdin(request.offset, request.data, request.eof)
        await stream.send_message(sr_pb2.SandboxStdinWriteV2Response())

    # -- snapshots ---------------------------------------------------------------------------

    async def TaskSnapshotFilesystem(self, stream: Any) -> None:
        """A copy of the sandbox's files as an image with the TTL the request carries (-1: kept
        until deleted). The faults in `State.snapshot_faults` make it slow (a caller's deadline
        passes first) or end the sandbox meanwhile (FAILED_PRECONDITION, nothing made)."""
        request, record = await self._task(stream)
        if not record.running:
            raise GRPCError(Status.FAILED_PRECONDITION, f"task {request.task_id} has finished")
        faults = self.state.snapshot_faults
        if faults.end_sandbox:
            record.finish(api_pb2.GenericResult(status=_TERMINATED, exception="ended"))
        if faults.delay:
            await asyncio.sleep(faults.delay)
        if not record.running:
            raise GRPCError(
                Status.FAILED_PRECONDITION,
                f"task {request.task_id} finished while its filesystem was snapshotted",
            )
        image_id = "im-" + request.snapshot_id.replace("-", "")[:22]
        target = self.state.root / "images" / image_id
        if image_id not in self.state.images:
            # A consistent copy: stop the sandbox's processes while its files are read.
            stopped = [p for p in record.all_processes() if p.returncode is None]
            for process in stopped:
                process.signal_group(signal.SIGSTOP)
            try:
                copy_filesystem(record.directory, target)
            finally:
                for process in stopped:
                    process.signal_group(signal.SIGCONT)
            ttl = request.ttl_seconds if request.HasField("ttl_seconds") else None
            self.state.images[image_id] = ImageRecord(
                image_id, snapshot=target, ttl_seconds=None if ttl == -1 else ttl, wire_ttl=ttl
            )
        await stream.send_message(sr_pb2.TaskSnapshotFilesystemResponse(image_id=image_id))
