"""A local Modal control plane for tests: the real `modal` SDK talks to it over gRPC on 127.0.0.1.

It is built on the service bases and protobufs shipped in the `modal` wheel (`modal_proto`) and
runs each sandbox as local processes in a temporary directory. See `server.ControlPlane`.
"""

from .fixtures import modal_control_plane, reset_modal_client, short_root, use_control_plane
from .server import ControlPlane

__all__ = [
    "ControlPlane",
    "modal_control_plane",
    "reset_modal_client",
    "short_root",
    "use_control_plane",
]
