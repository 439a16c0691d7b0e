"""Bearer tokens as `modal-workspace token` mints them."""

from __future__ import annotations

import secrets

__all__ = ["mint_token"]


def mint_token() -> str:
    """A fresh bearer token: 256 bits from the OS's random source, URL-safe."""
    return secrets.token_urlsafe(32)
