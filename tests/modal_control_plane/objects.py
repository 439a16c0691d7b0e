"""The objects a sandbox is made from, as the test control plane keeps them: the environment,
images (built at once, content-addressed, publishable by name), uploaded files and mounts,
and secrets (volumes are in `volumes`). A mixin of the `ModalClient` servicer.
"""

from __future__ import annotations

import hashlib
import shutil
from typing import Any

from google.protobuf import empty_pb2
from grpclib import GRPCError, Status
from modal_proto import api_pb2

from .state import ImageRecord, State

# Image builder version reported for every environment: one this SDK supports.
IMAGE_BUILDER_VERSION = "2025.06"
_EPHEMERAL = api_pb2.OBJECT_CREATION_TYPE_EPHEMERAL
_OWNED_BY_APP = api_pb2.OBJECT_CREATION_TYPE_ANONYMOUS_OWNED_BY_APP


async def request_of(state: State, stream: Any, *, auth_token: bool = False) -> Any:
    """The call's request, once its credentials (and, for V2 calls, its auth token) check out."""
    request = await stream.recv_message()
    state.check_credentials(stream.metadata)
    if auth_token:
        state.check_auth_token(stream.metadata)
    return request


class ObjectsServicer:
    state: State

    async def EnvironmentGetOrCreate(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        name = request.deployment_name or "main"
        await stream.send_message(
            api_pb2.EnvironmentGetOrCreateResponse(
                environment_id="en-" + name,
                metadata=api_pb2.EnvironmentMetadata(
                    name=name,
                    settings=api_pb2.EnvironmentSettings(
                        image_builder_version=IMAGE_BUILDER_VERSION, webhook_suffix="test"
                    ),
                ),
            )
        )

    # -- images, mounts, secrets ----------------------------------------------

    async def ImageGetOrCreate(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        image_id = self.state.image_id_for(request.image.SerializeToString(deterministic=True))
        self.state.images.setdefault(
            image_id,
            ImageRecord(
                image_id,
                dockerfile_commands=list(request.image.dockerfile_commands),
                context_mount_id=request.image.context_mount_id,
            ),
        )
        await stream.send_message(
            api_pb2.ImageGetOrCreateResponse(
                image_id=image_id,
                result=api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_SUCCESS),
                metadata=api_pb2.ImageMetadata(image_builder_version=IMAGE_BUILDER_VERSION),
            )
        )

    async def ImageFromId(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        if self.state.image(request.image_id) is None:
            raise self.state.image_missing(request.image_id)
        await stream.send_message(api_pb2.ImageFromIdResponse(image_id=request.image_id))

    async def ImageDelete(self, stream: Any) -> None:
        """`modal.experimental.image_delete`: the image can no longer be used."""
        request = await request_of(self.state, stream)
        record = self.state.images.pop(request.image_id, None)
        if record is None:
            raise GRPCError(Status.NOT_FOUND, f"Image {request.image_id} not found")
        if record.snapshot is not None:
            shutil.rmtree(record.snapshot, ignore_errors=True)
        await stream.send_message(empty_pb2.Empty())

    async def ImageGetByTag(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        # Names arrive as `[environment/]name[:tag]`; environments are not modelled here.
        tag = request.tag.rsplit("/", 1)[-1]
        image_id = self.state.image_tags.get(tag if ":" in tag else f"{tag}:latest")
        if image_id is None:
            raise GRPCError(Status.NOT_FOUND, f"Image '{request.tag}' not found")
        await stream.send_message(api_pb2.ImageGetByTagResponse(image_id=image_id))

    async def ImagePublish(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        if self.state.image(request.image_id) is None:
            raise GRPCError(Status.NOT_FOUND, f"Image {request.image_id} not found")
        tag = request.tag.rsplit("/", 1)[-1]
        self.state.image_tags[tag if ":" in tag else f"{tag}:latest"] = request.image_id
        await stream.send_message(api_pb2.ImagePublishResponse(image_id=request.image_id))

    async def MountBatchedCheckExistence(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        missing = [h for h in request.sha256_hex_hashes if h not in self.state.files]
        await stream.send_message(
            api_pb2.MountBatchedCheckExistenceResponse(missing_sha256_hex_hashes=missing)
        )

    async def MountPutFile(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        if request.data_blob_id:
            raise GRPCError(Status.UNIMPLEMENTED, "blob uploads (files of 4 MiB and more)")
        if hashlib.sha256(request.data).hexdigest() != request.sha256_hex:
            raise GRPCError(Status.INVALID_ARGUMENT, "data does not match sha256_hex")
        self.state.files[request.sha256_hex] = request.data
        await stream.send_message(api_pb2.MountPutFileResponse(exists=True))

    async def MountGetOrCreate(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        missing = [f.filename for f in request.files if f.sha256_hex not in self.state.files]
        if missing:
            raise GRPCError(Status.FAILED_PRECONDITION, f"files were never uploaded: {missing}")
        files = {f.filename: f.sha256_hex for f in request.files}
        # Content-addressed, as Modal treats a build context: the same files are the same mount,
        # so an image layer that copies them is a cache hit until one of them changes.
        listing = "\n".join(f"{name}\0{digest}" for name, digest in sorted(files.items()))
        mount_id = "mo-" + hashlib.sha256(listing.encode()).hexdigest()[:22]
        self.state.mounts[mount_id] = files
        await stream.send_message(api_pb2.MountGetOrCreateResponse(mount_id=mount_id))

    async def SecretGetOrCreate(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        if request.object_creation_type == _OWNED_BY_APP:
            # As Modal: an anonymous secret lives with the app that owns it.
            if request.app_id not in self.state.apps.values():
                raise GRPCError(Status.NOT_FOUND, f"App {request.app_id} not found")
            secret_id = self.state.new_secret(dict(request.env_dict))
        elif request.object_creation_type == _EPHEMERAL or not request.deployment_name:
            secret_id = self.state.new_secret(dict(request.env_dict))
        else:
            env = self.state.secrets.get(request.deployment_name)
            if env is None:
                raise GRPCError(Status.NOT_FOUND, f"Secret '{request.deployment_name}' not found")
            # As Modal answers `Secret.from_name(..., required_keys=[...])` for a secret that
            # lacks one of them (the SDK raises it as a ConflictError).
            missing = [key for key in request.required_keys if key not in env]
            if missing:
                raise GRPCError(
                    Status.FAILED_PRECONDITION, f"Secret is missing key(s): {', '.join(missing)}"
                )
            secret_id = self.state.new_secret(env)
        await stream.send_message(api_pb2.SecretGetOrCreateResponse(secret_id=secret_id))

    async def SecretGetInfo(self, stream: Any) -> None:
        # What `Secret._from_id` hydrates from: the secret's variable names, never its values.
        request = await request_of(self.state, stream)
        env = self.state.secret_ids.get(request.secret_id)
        if env is None:
            raise GRPCError(Status.NOT_FOUND, f"Secret {request.secret_id} not found")
        metadata = api_pb2.SecretMetadata(keys=sorted(env))
        await stream.send_message(api_pb2.SecretGetInfoResponse(metadata=metadata))

    async def SecretDelete(self, stream: Any) -> None:
        request = await request_of(self.state, stream)
        if self.state.secret_ids.pop(request.secret_id, None) is None:
            raise GRPCError(Status.NOT_FOUND, f"Secret {request.secret_id} not found")
        await stream.send_message(empty_pb2.Empty())
