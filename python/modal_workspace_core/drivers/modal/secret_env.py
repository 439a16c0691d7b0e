"""A workspace's `secret_env` as a Modal Secret of its own, made once at create and attached by
its id to every sandbox of the workspace, so that a resume gets the same values back while the
gateway keeps none of them (its record, in `records`, holds the id and the variable names).

Why not the SDK's `Secret.from_dict`: on the V2 sandbox calls (SDK 1.6) its values travel inline
in the create request and no Secret exists afterwards to attach again. Why not a named Secret
(`Secret.objects.create`): a resume would find it by a name anyone in the environment can read
or replace. So the Secret is made as the SDK makes a `from_dict` loaded inside an app
(`SecretGetOrCreate`, anonymous and owned by the sandbox app, so it lives as long as that app),
and referenced with `Secret._from_id`, the SDK's one constructor from an id (hidden from its
documentation, but the one `modal.Secret`'s own examples use).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import cast

import modal
import modal.config
import modal.exception
from modal.client import _Client
from modal_proto import api_pb2

from ...errors import UpstreamError
from .lookup import on_sdk_loop
from .records import StoredSecretEnv

__all__ = ["attach", "delete_secret_env", "make_secret_env", "open_secret_env"]

log = logging.getLogger(__name__)


async def _get_or_create(app_id: str, values: dict[str, str]) -> str:
    client = await _Client.from_env()
    request = api_pb2.SecretGetOrCreateRequest(
        object_creation_type=api_pb2.OBJECT_CREATION_TYPE_ANONYMOUS_OWNED_BY_APP,
        env_dict=values,
        app_id=app_id,
        environment_name=modal.config.config.get("environment") or "",
    )
    response = await client._stub.SecretGetOrCreate(request)
    return str(response.secret_id)


async def make_secret_env(app_id: str, values: Mapping[str, str]) -> StoredSecretEnv:
    """A new Secret of the sandbox app holding `values`: the only request that carries them."""
    secret_id = await on_sdk_loop(_get_or_create(app_id, dict(values)))
    return StoredSecretEnv(secret_id, tuple(sorted(values)))


def attach(stored: StoredSecretEnv) -> modal.Secret:
    """The workspace's Secret by id, for a sandbox's `secrets=`: the SDK hydrates it from the id
    (`SecretGetInfo`) when the sandbox is created, so a Secret Modal no longer has is a
    `NotFoundError` then, never a sandbox quietly started without its variables."""
    # The SDK leaves `_from_id` without a return type.
    return cast("modal.Secret", modal.Secret._from_id(stored.secret_id))


async def open_secret_env(workspace_id: str, stored: StoredSecretEnv) -> None:
    """Asks Modal for the workspace's Secret (hydrating it from its id), so that a resume
    refuses before it ends anything when Modal no longer has it (its app was deleted, or
    someone deleted it): the workspace could only come back without its variables."""
    try:
        await attach(stored).hydrate.aio()
    except modal.exception.NotFoundError as exc:
        raise UpstreamError(
            "upstream",
            f"the Modal Secret {stored.secret_id} that holds the secret_env of workspace "
            f"{workspace_id} is gone ({exc}); nothing was changed. Terminate the workspace "
            "and create it again with its secret_env",
            "secret_env",
        ) from None


async def _delete(secret_id: str) -> None:
    client = await _Client.from_env()
    await client._stub.SecretDelete(api_pb2.SecretDeleteRequest(secret_id=secret_id))


async def delete_secret_env(stored: StoredSecretEnv) -> None:
    """Deletes the workspace's Secret when nothing can resume it any more (its record is gone);
    one Modal no longer has is fine, and a failure is logged: the workspace is gone either way."""
    try:
        await on_sdk_loop(_delete(stored.secret_id))
    except modal.exception.NotFoundError:
        pass
    except modal.exception.Error as exc:
        log.warning("could not delete the secret_env Secret %s at Modal: %s", stored.secret_id, exc)
