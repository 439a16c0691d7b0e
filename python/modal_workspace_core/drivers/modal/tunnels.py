"""A workspace's preview ports on Modal: each port it declared at its create
(`resources.ports`) is opened as an encrypted tunnel when its sandbox is created
(`Sandbox.create(encrypted_ports=…)`; Modal fixes them there), and its preview URL is the
tunnel's public HTTPS URL (`Sandbox.tunnels()`). A resumed workspace is a new sandbox, with new
tunnels: its URLs change. Modal's tunnel URLs are unauthenticated (docs/modal.md, "Previews").
"""

from __future__ import annotations

import modal

from ...errors import ConflictError

__all__ = ["TUNNEL_WAIT_SECONDS", "tunnel_url"]

# How long Modal may take to report a new sandbox's tunnels.
TUNNEL_WAIT_SECONDS = 30


async def tunnel_url(sandbox: modal.Sandbox, workspace_id: str, port: int) -> str:
    """The public URL of `sandbox`'s tunnel to `port`."""
    tunnels = await sandbox.tunnels.aio(timeout=TUNNEL_WAIT_SECONDS)
    tunnel = tunnels.get(port)
    if tunnel is None:
        raise ConflictError(
            f"the sandbox of workspace {workspace_id} has no tunnel to port {port}: it was "
            "started without it (or has ended); ports are opened when a sandbox is created",
            field="port",
        )
    return tunnel.url
