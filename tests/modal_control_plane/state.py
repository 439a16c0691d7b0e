"""What the test control plane knows: apps, sandboxes, images, secrets, volumes, issued tokens,
and how many times each RPC was called.

Everything here is touched only from the control plane's own event loop.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from grpclib import GRPCError, Status

from . import tokens
from .deployed import FunctionsState
from .sandboxes import SandboxRecord, v1_id
from .volume_store import VolumesState

# Built images are content-addressed and, as on Modal, outlive any one server: the SDK keeps image
# objects hydrated across clients, so a later control plane in the same process must know them.
BUILT_IMAGES: set[str] = set()


@dataclass
class ImageRecord:
    image_id: str
    # A filesystem snapshot's files, copied into new sandboxes made from it; None for built images.
    snapshot: Path | None = None
    ttl_seconds: int | None = None  # None: kept until deleted
    dockerfile_commands: list[str] = field(default_factory=list)
    # The build context the layer's COPY lines read (a mount id), "" for none.
    context_mount_id: str = ""
    # The TTL exactly as the request carried it (-1 is the SDK's "no expiry" sentinel).
    wire_ttl: int | None = None
    created_at: float = field(default_factory=time.time)
    # Expired at Modal (`ControlPlane.expire_snapshots`, or its TTL passed): it cannot be opened.
    expired: bool = False

    def gone(self) -> bool:
        if self.expired:
            return True
        return self.ttl_seconds is not None and time.time() >= self.created_at + self.ttl_seconds


@dataclass
class SnapshotFaults:
    """What goes wrong with the next filesystem snapshots, as it can on Modal."""

    # Seconds each snapshot takes before it answers (beyond the caller's deadline: an overrun).
    delay: float = 0.0
    # The sandbox ends while its snapshot is being taken (a lifetime or OOM at that moment).
    end_sandbox: bool = False


@dataclass
class State:
    root: Path
    token_id: str
    token_secret: str
    mapped_prefixes: tuple[str, ...]
    router_url: str = ""
    # bubblewrap for sandbox processes when it works here (real container paths), else None.
    bwrap: str | None = None
    calls: Counter[str] = field(default_factory=Counter)
    unimplemented: list[str] = field(default_factory=list)
    apps: dict[tuple[str, str], str] = field(default_factory=dict)
    sandboxes: dict[str, SandboxRecord] = field(default_factory=dict)
    images: dict[str, ImageRecord] = field(default_factory=dict)
    image_tags: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    secret_ids: dict[str, dict[str, str]] = field(default_factory=dict)
    # Volumes, their files and the blocks those are made of (`volume_store`).
    volumes: VolumesState = field(default_factory=VolumesState)
    auth_tokens: set[str] = field(default_factory=set)
    # Uploaded file contents by sha256, and mounts as {path: sha256}.
    files: dict[str, bytes] = field(default_factory=dict)
    mounts: dict[str, dict[str, str]] = field(default_factory=dict)
    snapshot_faults: SnapshotFaults = field(default_factory=SnapshotFaults)
    # Deployed Functions and their calls (`functions`).
    functions: FunctionsState = field(default_factory=FunctionsState)
    # Seconds a new sandbox's container takes to start (scheduling, pulling its image): until
    # then it has no task, as on Modal, and the SDK waits for one.
    start_delay: float = 0.0

    # -- credentials -------------------------------------------------------------------------

    def check_credentials(self, metadata: object) -> None:
        """The token pair every client call carries; a wrong pair is UNAUTHENTICATED."""
        get = getattr(metadata, "get", None)
        token_id = get("x-modal-token-id") if get else None
        token_secret = get("x-modal-token-secret") if get else None
        if token_id != self.token_id or token_secret != self.token_secret:
            raise GRPCError(Status.UNAUTHENTICATED, "token id or secret is not valid")

    def issue_auth_token(self) -> str:
        token = tokens.mint({"sub": self.token_id})
        self.auth_tokens.add(token)
        return token

    def check_auth_token(self, metadata: object) -> None:
        """The short-lived token the V2 sandbox calls carry in `x-modal-auth-token`."""
        get = getattr(metadata, "get", None)
        token = get("x-modal-auth-token") if get else None
        if token not in self.auth_tokens or tokens.claims_of(str(token)) is None:
            raise GRPCError(Status.UNAUTHENTICATED, "missing or invalid x-modal-auth-token")

    def router_token(self, task_id: str) -> str:
        return tokens.mint({"task_id": task_id})

    # -- lookups -----------------------------------------------------------------------------

    def app_id(self, environment: str, name: str, create: bool) -> str:
        key = (environment or "main", name)
        if key not in self.apps:
            if not create:
                raise GRPCError(Status.NOT_FOUND, f"App '{name}' not found")
            self.apps[key] = v1_id("ap")
        return self.apps[key]

    def app_id_by_name(self, environment: str, name: str) -> str | None:
        return self.apps.get((environment or "main", name))

    def sandbox(self, sandbox_id: str) -> SandboxRecord:
        record = self.sandboxes.get(sandbox_id)
        if record is None:
            raise GRPCError(Status.NOT_FOUND, f"Sandbox {sandbox_id} not found")
        return record

    def sandbox_by_task(self, task_id: str) -> SandboxRecord:
        for record in self.sandboxes.values():
            if record.task_id == task_id:
                return record
        raise GRPCError(Status.NOT_FOUND, f"Task {task_id} not found")

    def running_by_name(self, app_id: str, name: str) -> SandboxRecord | None:
        for record in self.sandboxes.values():
            if record.app_id == app_id and record.name == name and record.running:
                return record
        return None

    def image_id_for(self, definition: bytes) -> str:
        """Images are content-addressed: the same definition gets the same id (a cache hit)."""
        image_id = "im-" + hashlib.sha256(definition).hexdigest()[:22]
        BUILT_IMAGES.add(image_id)
        return image_id

    def image(self, image_id: str) -> ImageRecord | None:
        """A usable image; an expired or deleted snapshot image is as missing as at Modal."""
        if image_id not in self.images and image_id in BUILT_IMAGES:
            self.images[image_id] = ImageRecord(image_id)
        record = self.images.get(image_id)
        return None if record is None or record.gone() else record

    def image_missing(self, image_id: str) -> GRPCError:
        record = self.images.get(image_id)
        if record is not None and record.gone():
            return GRPCError(Status.NOT_FOUND, f"Image {image_id} has expired")
        return GRPCError(Status.NOT_FOUND, f"Image {image_id} not found")

    def new_secret(self, env: dict[str, str]) -> str:
        secret_id = "st-" + secrets.token_hex(11)
        self.secret_ids[secret_id] = dict(env)
        return secret_id
