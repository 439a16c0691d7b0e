"""Previews: an app a workspace serves on a port it declared at its create
(`workspace_create(ports=…)`, kept in its record's `resources.ports`), opened in a browser.

`workspace_preview_url` answers where: on a driver whose provider publishes the ports itself
(Modal: the sandbox's encrypted tunnel, `preview_url`), the tunnel's URL; else a link to the
gateway's preview proxy (`PREVIEW_ROUTE`, served by the REST surface), which carries the
browser's requests over relays the driver opens (`open_port`: locally, the agent's connection to
the port from inside the workspace). The link is on a host name of the preview's own
(`policy.preview_origin_host`: `p-<id>-<port>.<zone>`), never the gateway's, so that the app's
scripts (workspace output) share an origin with nothing else. It holds a ticket (purpose
`preview`, one workspace, one port, expiring), never the bearer token. A port the workspace did
not declare is refused, when the link is asked for and again when a ticket is presented.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import Field

from .. import policy
from ..config.gateway import PREVIEW_HOST_ENV
from ..drivers.base import WorkspaceRecord
from ..errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    core_refusal,
    denied,
)
from ..runtime.call import LINK_BASE, PREVIEW_ZONE
from .machinery import tickets
from .machinery.fields import Input, Output, PreviewPort, Timestamp, WorkspaceId
from .machinery.run import in_call
from .machinery.table import READ, WS, Declarations

if TYPE_CHECKING:
    from ..runtime.service import Service

__all__ = [
    "PREVIEW_ROUTE",
    "PURPOSE",
    "PreviewTarget",
    "declared_ports",
    "open_preview",
    "preview_target",
    "workspace_preview_url",
]

declare = Declarations()

# Where the proxy serves previews, on the preview's own host name: `<PREVIEW_ROUTE><ticket>/`
# is the app's `/`, so its relative links stay under the ticket.
PREVIEW_ROUTE = "/preview/"
PURPOSE: tickets.Purpose = "preview"


class PreviewInput(Input):
    workspace_id: WorkspaceId
    port: PreviewPort
    seconds: int = Field(
        tickets.DEFAULT_SECONDS,
        ge=1,
        le=tickets.MAX_SECONDS,
        description="A local link's lifetime.",
    )


class Preview(Output):
    url: str | None = Field(default=None, description="Open in a browser, no token.")
    port: int = Field(description="The workspace's port it reaches.")
    path: str | None = Field(default=None, description="The link's path on its preview host.")
    expires_at: Timestamp = Field(default=None, description="null: lives with the workspace.")


def declared_ports(record: WorkspaceRecord) -> list[int]:
    """The preview ports the workspace declared at its create (none for older records)."""
    ports = record.resources.get("ports") or []
    return [p for p in ports if isinstance(p, int) and not isinstance(p, bool)]


def _check_declared(record: WorkspaceRecord, port: int) -> None:
    declared = declared_ports(record)
    if port not in declared:
        listed = ", ".join(str(p) for p in declared) or "none"
        raise InvalidArgumentError(
            f"port {port} was not declared when workspace {record.workspace_id} was created "
            f"(its ports: {listed}); ports are fixed at create: workspace_create(ports=[...])",
            field="port",
        )


@declare(
    method="GET",
    path=WS + "/preview",
    hints=READ,
    summary="A browser link to a port the workspace declared at create.",
    limits="Modal: a public tunnel URL; local: an expiring gateway link.",
    in_actions=False,
)
async def workspace_preview_url(svc: Service, inp: PreviewInput) -> Preview:
    record = await svc.record(inp.workspace_id)
    _check_declared(record, inp.port)
    publish = getattr(svc.driver, "preview_url", None)
    if publish is not None:
        if record.state != "running":
            # A stopped or suspended one starts again, with tunnels of its own.
            await svc.agent(inp.workspace_id)
        url = await publish(inp.workspace_id, inp.port)
        return Preview(url=url, port=inp.port)
    url = _preview_base(inp.workspace_id, inp.port)
    ticket = tickets.mint(svc.settings, PURPOSE, inp.workspace_id, str(inp.port), inp.seconds)
    path = f"{PREVIEW_ROUTE}{ticket.value}/"
    return Preview(
        url=None if url is None else url + path,
        port=inp.port,
        path=path,
        expires_at=ticket.expires,  # type: ignore[arg-type]  # made a timestamp
    )


def _preview_base(workspace_id: str, port: int) -> str | None:
    """`scheme://p-<id>-<port>.<zone>[:port]`: the preview's own origin, with the scheme and
    port the gateway is reached by; None outside a request (an in-process caller has no proxy,
    only the path)."""
    base = LINK_BASE.get()
    if base is None:
        return None
    zone = PREVIEW_ZONE.get()
    if zone is None:
        raise PermissionDeniedError(
            "previews are off on this gateway: it serves each on a host name of its own, and "
            "none is set (it defaults to localhost only on a loopback gateway). An operator "
            f"turns them on with {PREVIEW_HOST_ENV}=<a DNS name whose every subdomain reaches "
            "the gateway>"
        )
    with core_refusal(None):
        host = policy.preview_origin_host(zone, workspace_id, port)
    parts = urllib.parse.urlsplit(base)
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


@dataclass(frozen=True)
class PreviewTarget:
    """What a presented preview ticket opens: one declared port of one workspace."""

    workspace_id: str
    port: int
    expires: int


async def preview_target(svc: Service, ticket: str) -> PreviewTarget:
    """The port `ticket` opens, when this deployment minted it for a preview, it is live, and
    the port is still one its workspace declared; else a 403 that says no more (or a 404 for a
    workspace that is gone)."""
    return await in_call(svc, _target(svc, ticket))


async def _target(svc: Service, ticket: str) -> PreviewTarget:
    grant = tickets.check(svc.settings, ticket, PURPOSE)
    with core_refusal(None, error=lambda _message, _field: denied(tickets.REFUSAL, None)):
        port = policy.preview_port(int(grant.object_id) if grant.object_id.isdigit() else -1)
    record = await svc.live_record(grant.workspace_id)
    if port not in declared_ports(record):
        # Only a holder of the deployment's key could have minted it: refused all the same.
        raise denied(tickets.REFUSAL, None)
    return PreviewTarget(workspace_id=grant.workspace_id, port=port, expires=grant.expires)


async def open_preview(
    svc: Service, target: PreviewTarget
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A byte stream to the target's port inside its workspace, which counts as its use (a
    person looking at a preview keeps it from its idle limit) and starts it when it is stopped
    or suspended. Raises a `WorkspaceError` (an `AgentError` of code `unavailable` when nothing
    listens on the port)."""
    return await in_call(svc, _open(svc, target))


async def _open(
    svc: Service, target: PreviewTarget
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    open_port: Any = getattr(svc.driver, "open_port", None)
    if open_port is None:
        raise NotFoundError("this gateway's workspaces publish their ports themselves")
    # Reaching the agent (through the call) is the workspace's use, and starts it if needed.
    await svc.agent(target.workspace_id)
    stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] = await open_port(
        target.workspace_id, target.port
    )
    return stream
