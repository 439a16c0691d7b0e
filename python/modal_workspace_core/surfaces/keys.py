"""The operator's static keys (the tokens of `MODAL_WORKSPACE_MCP_TOKEN` and its file): how a
presented key is compared with them, in a header or in the consent form."""

from __future__ import annotations

import hmac
from collections.abc import Sequence

__all__ = ["bearer_value", "key_matches", "token_matches"]


def key_matches(presented: bytes, tokens: Sequence[bytes]) -> bool:
    """True when `presented` is one of `tokens`. Every token is compared, each in constant
    time, so the time taken says nothing about which token came close."""
    matched = False
    for token in tokens:
        matched |= hmac.compare_digest(token, presented)
    return matched and bool(presented)


def token_matches(header: bytes | None, tokens: Sequence[bytes]) -> bool:
    """True when `header` is `Bearer <one of tokens>`."""
    presented = bearer_value(header)
    return presented is not None and key_matches(presented, tokens)


def bearer_value(header: bytes | None) -> bytes | None:
    """The token of an `Authorization: Bearer <token>` header; None when it is not one (or not
    ASCII)."""
    if not header or not header.isascii():
        return None
    scheme, _, presented = header.strip().partition(b" ")
    presented = presented.strip()
    if scheme.lower() != b"bearer" or not presented:
        return None
    return presented
