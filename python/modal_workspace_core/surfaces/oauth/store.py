"""What the gateway's authorization server remembers, behind one small interface that every
gateway process shares: the clients it registered, the authorizations waiting for consent, the
codes it handed out and the tokens it issued.

Codes and tokens are kept by the SHA-256 of their value, never the value: a copy of the store
grants nothing. A token belongs to a grant (one consent), which revocation and code reuse end
whole. `SharedOAuthStore` keeps them as records of the deployment's shared store
(`shared_store`), which every gateway process reads: a token one mints, another accepts; a
revocation one makes, another sees at its next lookup.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from ...shared_store import SharedStore

__all__ = [
    "UNUSED_CLIENT_SECONDS",
    "IssuedToken",
    "OAuthStore",
    "SharedOAuthStore",
    "digest",
]

# A registered client that has held no token for this long is forgotten at a later
# registration: one that comes back registers again (hosts do, on `invalid_client`).
UNUSED_CLIENT_SECONDS = 7 * 24 * 3600


def digest(value: str) -> str:
    """How a code or token is kept and looked up."""
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    """An access or refresh token as the store holds it (its value is not held)."""

    kind: str  # "access" or "refresh"
    grant: str
    client_id: str
    scopes: list[str]
    resource: str | None
    expires_at: int


class OAuthStore(Protocol):
    """The authorization server's state. Every method is atomic on its own."""

    async def put_client(self, client_id: str, info: str) -> None:
        """Registers a client; clients registered `UNUSED_CLIENT_SECONDS` ago that hold no
        token are forgotten meanwhile (registration is open to anyone)."""

    async def get_client(self, client_id: str) -> str | None: ...

    async def clients_registered_since(self, since: float) -> int: ...

    async def put_pending(self, request_id: str, record: dict[str, Any], expires: float) -> None:
        """An authorization waiting for consent."""

    async def get_pending(self, request_id: str) -> dict[str, Any] | None: ...

    async def pending_count(self) -> int:
        """How many authorizations wait (unexpired)."""

    async def take_pending(self, request_id: str) -> dict[str, Any] | None:
        """The waiting authorization, removed: a consent is given once."""

    async def fail_pending(self, request_id: str, most: int) -> bool:
        """Counts a wrong key given for the authorization; past `most`, removes it. True while
        it still waits."""

    async def put_code(
        self, code: str, grant: str, record: dict[str, Any], expires: float
    ) -> None: ...

    async def get_code(self, code: str) -> dict[str, Any] | None:
        """An unused, unexpired code's record. A code seen again after its use ends its grant
        (RFC 6749 §4.1.2: whoever holds it may be replaying it)."""

    async def use_code(self, code: str) -> str | None:
        """Marks the code used and answers its grant; None when it was used (or is gone)."""

    async def put_token(self, value: str, token: IssuedToken) -> None: ...

    async def get_token(self, value: str, kind: str) -> IssuedToken | None:
        """The token, unexpired and not revoked."""

    async def take_token(self, value: str, kind: str) -> IssuedToken | None:
        """The token, removed (a refresh token is used once)."""

    async def end_grant(self, grant: str) -> None:
        """Revokes every token of the grant, and its code."""

    async def grant_of(self, value: str) -> str | None: ...


# Where each kind of record lives in the shared store. Every name below a folder is a digest
# or a number this module made: nothing a client sent is ever part of a key.
_ROOT = "oauth"
_CLIENTS = f"{_ROOT}/clients"  # /<client digest>: {info, registered, used}
_REGISTERED = f"{_ROOT}/registered"  # /<hour>/<milliseconds>.<client digest>
_PENDING = f"{_ROOT}/pending"  # /<request digest>: {record, expires}
_PENDING_BY_EXPIRY = f"{_ROOT}/pending-by-expiry"  # /<expires>.<request digest>
_PENDING_TAKEN = f"{_ROOT}/pending-taken"  # /<request digest>: the one consent
_PENDING_FAILED = f"{_ROOT}/pending-failed"  # /<request digest>/<n>: the nth wrong key
_CODES = f"{_ROOT}/codes"  # /<code digest>: {grant, record, expires}
_CODES_USED = f"{_ROOT}/codes-used"  # /<code digest>: the one exchange
_TOKENS = f"{_ROOT}/tokens"  # /<token digest>: IssuedToken
_TOKENS_TAKEN = f"{_ROOT}/tokens-taken"  # /<token digest>: the one refresh
_GRANTS = f"{_ROOT}/grants"  # /<grant digest>/(code|token).<digest>: what revocation ends
_EXPIRY = f"{_ROOT}/expiry"  # /<hour>/(code|token).<digest>.<grant digest>
_HOUR = 3600
# How often one process looks for codes and tokens past their expiry, and how many hours of
# them it clears at once (a write waits for it).
_EXPIRY_SWEEP_SECONDS = 600
_EXPIRY_HOURS_PER_SWEEP = 4
_MARK = b"1"
_DIGEST = re.compile(r"[0-9a-f]{64}")


def _json(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _loaded(raw: bytes | None) -> dict[str, Any] | None:
    return None if raw is None else dict(json.loads(raw))


class SharedOAuthStore:
    """`OAuthStore` as records of a `SharedStore`.

    What must happen once across every gateway process (a consent given, a code exchanged, a
    refresh token used, the nth wrong key counted) is the one `create` of a marker that only one
    of them wins; everything else is a record written whole."""

    def __init__(self, shared: SharedStore, clock: Callable[[], float] = time.time) -> None:
        self.shared = shared
        self.clock = clock
        self._next_expiry_sweep = 0.0

    # --- clients ----------------------------------------------------------------------------

    async def put_client(self, client_id: str, info: str) -> None:
        now = self.clock()
        await self._forget_unused_clients(now)
        key = digest(client_id)
        record = {"info": info, "registered": now, "used": False}
        await self.shared.write(f"{_CLIENTS}/{key}", _json(record))
        await self.shared.write(f"{_REGISTERED}/{int(now // _HOUR)}/{int(now * 1000)}.{key}", _MARK)

    async def _forget_unused_clients(self, now: float) -> None:
        """Clients registered `UNUSED_CLIENT_SECONDS` ago that never got a token are removed
        (anyone may register; hosts that come back register again)."""
        before = now - UNUSED_CLIENT_SECONDS
        for hour in await self.shared.names(_REGISTERED):
            if not hour.isdigit() or int(hour) * _HOUR > before:
                continue
            entries = await self.shared.names(f"{_REGISTERED}/{hour}")
            kept = 0
            for entry in entries:
                when, _, key = entry.partition(".")
                if not when.isdigit() or not _DIGEST.fullmatch(key) or int(when) / 1000 > before:
                    kept += 1
                    continue
                client = _loaded(await self.shared.read(f"{_CLIENTS}/{key}"))
                if client is not None and not client.get("used"):
                    await self.shared.remove(f"{_CLIENTS}/{key}")
                await self.shared.remove(f"{_REGISTERED}/{hour}/{entry}")
            if not kept:
                await self.shared.remove(f"{_REGISTERED}/{hour}")

    async def get_client(self, client_id: str) -> str | None:
        client = _loaded(await self.shared.read(f"{_CLIENTS}/{digest(client_id)}"))
        return None if client is None else str(client["info"])

    async def clients_registered_since(self, since: float) -> int:
        count = 0
        for hour in range(int(since // _HOUR), int(self.clock() // _HOUR) + 1):
            for entry in await self.shared.names(f"{_REGISTERED}/{hour}"):
                when = entry.partition(".")[0]
                count += when.isdigit() and int(when) / 1000 >= since
        return count

    async def _mark_client_used(self, client_id: str) -> None:
        key = f"{_CLIENTS}/{digest(client_id)}"
        client = _loaded(await self.shared.read(key))
        if client is not None and not client.get("used"):
            await self.shared.write(key, _json({**client, "used": True}))

    # --- authorizations waiting for consent -------------------------------------------------

    async def put_pending(self, request_id: str, record: dict[str, Any], expires: float) -> None:
        await self._clear_expired_pending(self.clock())
        key = digest(request_id)
        await self.shared.write(f"{_PENDING}/{key}", _json({"record": record, "expires": expires}))
        await self.shared.write(f"{_PENDING_BY_EXPIRY}/{int(expires)}.{key}", _MARK)

    async def _clear_expired_pending(self, now: float) -> None:
        for entry in await self.shared.names(_PENDING_BY_EXPIRY):
            expires, _, key = entry.partition(".")
            if expires.isdigit() and _DIGEST.fullmatch(key) and int(expires) < now:
                await self._forget_pending(key, entry)

    async def _forget_pending(self, key: str, entry: str) -> None:
        await self.shared.remove(f"{_PENDING}/{key}")
        await self.shared.remove(f"{_PENDING_FAILED}/{key}")
        await self.shared.remove(f"{_PENDING_BY_EXPIRY}/{entry}")

    async def pending_count(self) -> int:
        now = self.clock()
        entries = await self.shared.names(_PENDING_BY_EXPIRY)
        expiries = [entry.partition(".")[0] for entry in entries]
        return sum(1 for e in expiries if e.isdigit() and int(e) >= now)

    async def _pending(self, key: str) -> dict[str, Any] | None:
        held = _loaded(await self.shared.read(f"{_PENDING}/{key}"))
        if held is None or held["expires"] < self.clock():
            return None
        return held

    async def get_pending(self, request_id: str) -> dict[str, Any] | None:
        held = await self._pending(digest(request_id))
        return None if held is None else dict(held["record"])

    async def take_pending(self, request_id: str) -> dict[str, Any] | None:
        key = digest(request_id)
        held = await self._pending(key)
        if held is None or not await self.shared.create(f"{_PENDING_TAKEN}/{key}", _MARK):
            return None
        await self._forget_pending(key, f"{int(held['expires'])}.{key}")
        return dict(held["record"])

    async def fail_pending(self, request_id: str, most: int) -> bool:
        key = digest(request_id)
        held = await self._pending(key)
        if held is None:
            return False
        # The nth wrong key is the marker n that this call made: concurrent guesses each count.
        for n in range(1, most + 1):
            if await self.shared.create(f"{_PENDING_FAILED}/{key}/{n}", _MARK):
                if n < most:
                    return True
                break
        await self._forget_pending(key, f"{int(held['expires'])}.{key}")
        return False

    # --- codes ------------------------------------------------------------------------------

    async def put_code(self, code: str, grant: str, record: dict[str, Any], expires: float) -> None:
        await self._clear_expired()
        key, grant_key = digest(code), digest(grant)
        value = {"grant": grant, "record": record, "expires": expires}
        # Indexed first: whatever is found later can be found by its grant and its expiry.
        await self.shared.write(f"{_GRANTS}/{grant_key}/code.{key}", _MARK)
        await self.shared.write(f"{_EXPIRY}/{int(expires // _HOUR)}/code.{key}.{grant_key}", _MARK)
        await self.shared.write(f"{_CODES}/{key}", _json(value))

    async def _code(self, code: str) -> tuple[str, dict[str, Any]] | None:
        held = _loaded(await self.shared.read(f"{_CODES}/{digest(code)}"))
        if held is None or held["expires"] < self.clock():
            return None
        return str(held["grant"]), dict(held["record"])

    async def get_code(self, code: str) -> dict[str, Any] | None:
        held = await self._code(code)
        if held is None:
            return None
        grant, record = held
        if await self.shared.read(f"{_CODES_USED}/{digest(code)}") is not None:
            # A used code seen again: whoever holds it may be replaying it.
            await self.end_grant(grant)
            return None
        return record

    async def use_code(self, code: str) -> str | None:
        held = await self._code(code)
        if held is None:
            return None
        grant = held[0]
        if not await self.shared.create(f"{_CODES_USED}/{digest(code)}", _MARK):
            await self.end_grant(grant)
            return None
        return grant

    # --- tokens -----------------------------------------------------------------------------

    async def put_token(self, value: str, token: IssuedToken) -> None:
        await self._clear_expired()
        key, grant_key = digest(value), digest(token.grant)
        hour = int(token.expires_at // _HOUR)
        await self.shared.write(f"{_GRANTS}/{grant_key}/token.{key}", _MARK)
        await self.shared.write(f"{_EXPIRY}/{hour}/token.{key}.{grant_key}", _MARK)
        await self.shared.write(f"{_TOKENS}/{key}", _json(asdict(token)))
        await self._mark_client_used(token.client_id)

    async def _token(self, key: str, kind: str) -> IssuedToken | None:
        held = _loaded(await self.shared.read(f"{_TOKENS}/{key}"))
        if held is None:
            return None
        token = IssuedToken(**held)
        if token.kind != kind or token.expires_at < self.clock():
            return None
        return token

    async def get_token(self, value: str, kind: str) -> IssuedToken | None:
        return await self._token(digest(value), kind)

    async def take_token(self, value: str, kind: str) -> IssuedToken | None:
        key = digest(value)
        token = await self._token(key, kind)
        if token is None or not await self.shared.create(f"{_TOKENS_TAKEN}/{key}", _MARK):
            return None
        await self.shared.remove(f"{_TOKENS}/{key}")
        return token

    async def end_grant(self, grant: str) -> None:
        grant_key = digest(grant)
        for entry in await self.shared.names(f"{_GRANTS}/{grant_key}"):
            kind, _, key = entry.partition(".")
            if not _DIGEST.fullmatch(key):
                continue
            if kind == "token":
                await self.shared.remove(f"{_TOKENS}/{key}")
            elif kind == "code":
                await self.shared.create(f"{_CODES_USED}/{key}", _MARK)

    async def grant_of(self, value: str) -> str | None:
        held = _loaded(await self.shared.read(f"{_TOKENS}/{digest(value)}"))
        return None if held is None else str(held["grant"])

    # --- expiry -----------------------------------------------------------------------------

    async def _clear_expired(self) -> None:
        """Removes codes and tokens whose hour of expiry has passed: at most every
        `_EXPIRY_SWEEP_SECONDS` in a process, a few hours at a time."""
        now = self.clock()
        if now < self._next_expiry_sweep:
            return
        self._next_expiry_sweep = now + _EXPIRY_SWEEP_SECONDS
        past = [
            h
            for h in await self.shared.names(_EXPIRY)
            if h.isdigit() and (int(h) + 1) * _HOUR <= now
        ]
        for hour in past[:_EXPIRY_HOURS_PER_SWEEP]:
            for entry in await self.shared.names(f"{_EXPIRY}/{hour}"):
                parts = entry.split(".")
                if len(parts) != 3 or not all(_DIGEST.fullmatch(p) for p in parts[1:]):
                    continue
                kind, key, grant_key = parts
                if kind == "token":
                    await self.shared.remove(f"{_TOKENS}/{key}")
                    await self.shared.remove(f"{_TOKENS_TAKEN}/{key}")
                elif kind == "code":
                    await self.shared.remove(f"{_CODES}/{key}")
                    await self.shared.remove(f"{_CODES_USED}/{key}")
                await self.shared.remove(f"{_GRANTS}/{grant_key}/{kind}.{key}")
            await self.shared.remove(f"{_EXPIRY}/{hour}")
