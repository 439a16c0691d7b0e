"""Short-lived bearer tokens in the shape the Modal SDK parses (a JWT it reads `exp` from).

The SDK never verifies signatures client-side, so the test control plane mints unsigned tokens
and checks them against the ones it issued: enough to prove each call carries the right one.
"""

from __future__ import annotations

import base64
import json
import secrets
import time


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mint(claims: dict[str, object], lifetime_seconds: float = 3600.0) -> str:
    """An unsigned JWT carrying `claims`, a random `jti` and an expiry `lifetime_seconds` away."""
    header = {"alg": "none", "typ": "JWT"}
    body = {**claims, "exp": int(time.time() + lifetime_seconds), "jti": secrets.token_hex(8)}
    return f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(body).encode())}."


def claims_of(token: str) -> dict[str, object] | None:
    """The claims of a token minted by `mint`, or None when it is malformed or expired."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        body = json.loads(_b64url_decode(parts[1]))
    except ValueError:
        return None
    if not isinstance(body, dict) or float(body.get("exp", 0)) < time.time():
        return None
    return body
