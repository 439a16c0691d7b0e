"""What the gateway's authorization server remembers, behind one small interface that every
gateway process shares: the clients it registered, the authorizations waiting for consent, the
codes it handed out and the tokens it issued.

Codes and tokens are kept by the SHA-256 of their value, never the value: a copy of the store
grants nothing. A token belongs to a grant (one consent), which revocation and code reuse end
whole. `SqliteOAuthStore` keeps them in one SQLite file (WAL, so that several gateway processes
on one data root see each other's writes at their next read).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

__all__ = [
    "UNUSED_CLIENT_SECONDS",
    "IssuedToken",
    "OAuthStore",
    "SqliteOAuthStore",
    "digest",
]

T = TypeVar("T")

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


_SCHEMA = """
CREATE TABLE IF NOT EXISTS clients (
    client_id TEXT PRIMARY KEY, info TEXT NOT NULL, registered REAL NOT NULL);
CREATE TABLE IF NOT EXISTS pending (
    id TEXT PRIMARY KEY, record TEXT NOT NULL, expires REAL NOT NULL,
    failures INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS codes (
    hash TEXT PRIMARY KEY, grant_id TEXT NOT NULL, record TEXT NOT NULL,
    expires REAL NOT NULL, used INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS tokens (
    hash TEXT PRIMARY KEY, kind TEXT NOT NULL, grant_id TEXT NOT NULL, client_id TEXT NOT NULL,
    scopes TEXT NOT NULL, resource TEXT, expires INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS tokens_by_grant ON tokens (grant_id);
"""


class SqliteOAuthStore:
    """`OAuthStore` in one SQLite file. Each call opens its own connection in a worker thread:
    the event loop never waits on the disk, and processes never share a connection."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.clock = clock
        self._created = False

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        db.execute("PRAGMA busy_timeout = 10000")
        return db

    def _create(self) -> None:
        """The file and its tables, at the first write: a server that no client ever asks
        for a token (and every request with a wrong static key) leaves no file behind."""
        if self._created:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Only the gateway's user reads the tokens' digests and the clients' secrets.
        self.path.touch(mode=0o600, exist_ok=True)
        with contextlib.closing(self._connect()) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
        self._created = True

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work` in one transaction that may write, creating the store if need be."""
        return await asyncio.to_thread(self._transaction, work, "IMMEDIATE")

    async def _read(
        self, work: Callable[[sqlite3.Connection], T], mode: str = "DEFERRED"
    ) -> T | None:
        """`work` in one transaction; None, without creating it, from a store never written
        (where nothing is found). `mode` IMMEDIATE when the work may write."""

        def in_thread() -> T | None:
            if not self._created and not self.path.exists():
                return None
            return self._transaction(work, mode)

        return await asyncio.to_thread(in_thread)

    def _transaction(self, work: Callable[[sqlite3.Connection], T], mode: str) -> T:
        self._create()
        db = self._connect()
        try:
            db.execute(f"BEGIN {mode}")
            try:
                result = work(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result
        finally:
            db.close()

    # --- clients ----------------------------------------------------------------------------

    async def put_client(self, client_id: str, info: str) -> None:
        now = self.clock()

        def put(db: sqlite3.Connection) -> None:
            db.execute(
                "DELETE FROM clients WHERE registered < ? AND client_id NOT IN "
                "(SELECT client_id FROM tokens)",
                (now - UNUSED_CLIENT_SECONDS,),
            )
            db.execute("INSERT INTO clients VALUES (?, ?, ?)", (client_id, info, now))

        await self._run(put)

    async def get_client(self, client_id: str) -> str | None:
        row = await self._read(
            lambda db: db.execute(
                "SELECT info FROM clients WHERE client_id = ?", (client_id,)
            ).fetchone()
        )
        return None if row is None else str(row[0])

    async def clients_registered_since(self, since: float) -> int:
        row = await self._read(
            lambda db: db.execute(
                "SELECT COUNT(*) FROM clients WHERE registered >= ?", (since,)
            ).fetchone()
        )
        return 0 if row is None else int(row[0])

    # --- authorizations waiting for consent -------------------------------------------------

    async def put_pending(self, request_id: str, record: dict[str, Any], expires: float) -> None:
        now, text = self.clock(), json.dumps(record)

        def put(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM pending WHERE expires < ?", (now,))
            db.execute(
                "INSERT INTO pending (id, record, expires) VALUES (?, ?, ?)",
                (request_id, text, expires),
            )

        await self._run(put)

    async def pending_count(self) -> int:
        now = self.clock()
        row = await self._read(
            lambda db: db.execute(
                "SELECT COUNT(*) FROM pending WHERE expires >= ?", (now,)
            ).fetchone()
        )
        return 0 if row is None else int(row[0])

    async def get_pending(self, request_id: str) -> dict[str, Any] | None:
        now = self.clock()
        row = await self._read(
            lambda db: db.execute(
                "SELECT record FROM pending WHERE id = ? AND expires >= ?", (request_id, now)
            ).fetchone()
        )
        return None if row is None else dict(json.loads(row[0]))

    async def take_pending(self, request_id: str) -> dict[str, Any] | None:
        now = self.clock()

        def take(db: sqlite3.Connection) -> Any:
            row = db.execute(
                "SELECT record FROM pending WHERE id = ? AND expires >= ?", (request_id, now)
            ).fetchone()
            db.execute("DELETE FROM pending WHERE id = ?", (request_id,))
            return row

        row = await self._read(take, "IMMEDIATE")
        return None if row is None else dict(json.loads(row[0]))

    async def fail_pending(self, request_id: str, most: int) -> bool:
        def fail(db: sqlite3.Connection) -> bool:
            db.execute("UPDATE pending SET failures = failures + 1 WHERE id = ?", (request_id,))
            db.execute("DELETE FROM pending WHERE id = ? AND failures >= ?", (request_id, most))
            return (
                db.execute("SELECT 1 FROM pending WHERE id = ?", (request_id,)).fetchone()
                is not None
            )

        return bool(await self._read(fail, "IMMEDIATE"))

    # --- codes ------------------------------------------------------------------------------

    async def put_code(self, code: str, grant: str, record: dict[str, Any], expires: float) -> None:
        now, text = self.clock(), json.dumps(record)

        def put(db: sqlite3.Connection) -> None:
            # A used code is kept until it expires, so that its replay is recognised.
            db.execute("DELETE FROM codes WHERE expires < ?", (now,))
            db.execute(
                "INSERT INTO codes VALUES (?, ?, ?, ?, 0)", (digest(code), grant, text, expires)
            )

        await self._run(put)

    async def get_code(self, code: str) -> dict[str, Any] | None:
        now, key = self.clock(), digest(code)

        def get(db: sqlite3.Connection) -> Any:
            row = db.execute(
                "SELECT record, grant_id, used FROM codes WHERE hash = ? AND expires >= ?",
                (key, now),
            ).fetchone()
            if row is not None and row[2]:
                _end_grant(db, row[1])
                return None
            return row

        row = await self._read(get, "IMMEDIATE")
        return None if row is None else dict(json.loads(row[0]))

    async def use_code(self, code: str) -> str | None:
        now, key = self.clock(), digest(code)

        def use(db: sqlite3.Connection) -> str | None:
            row = db.execute(
                "SELECT grant_id, used FROM codes WHERE hash = ? AND expires >= ?", (key, now)
            ).fetchone()
            if row is None:
                return None
            if row[1]:
                _end_grant(db, row[0])
                return None
            db.execute("UPDATE codes SET used = 1 WHERE hash = ?", (key,))
            return str(row[0])

        return await self._read(use, "IMMEDIATE")

    # --- tokens -----------------------------------------------------------------------------

    async def put_token(self, value: str, token: IssuedToken) -> None:
        now = self.clock()
        row = (
            digest(value),
            token.kind,
            token.grant,
            token.client_id,
            " ".join(token.scopes),
            token.resource,
            token.expires_at,
        )

        def put(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM tokens WHERE expires < ?", (now,))
            db.execute("INSERT INTO tokens VALUES (?, ?, ?, ?, ?, ?, ?)", row)

        await self._run(put)

    async def get_token(self, value: str, kind: str) -> IssuedToken | None:
        now, key = self.clock(), digest(value)
        row = await self._read(
            lambda db: db.execute(
                "SELECT kind, grant_id, client_id, scopes, resource, expires FROM tokens "
                "WHERE hash = ? AND kind = ? AND expires >= ?",
                (key, kind, now),
            ).fetchone()
        )
        return None if row is None else _token(row)

    async def take_token(self, value: str, kind: str) -> IssuedToken | None:
        now, key = self.clock(), digest(value)

        def take(db: sqlite3.Connection) -> Any:
            row = db.execute(
                "SELECT kind, grant_id, client_id, scopes, resource, expires FROM tokens "
                "WHERE hash = ? AND kind = ? AND expires >= ?",
                (key, kind, now),
            ).fetchone()
            db.execute("DELETE FROM tokens WHERE hash = ?", (key,))
            return row

        row = await self._read(take, "IMMEDIATE")
        return None if row is None else _token(row)

    async def end_grant(self, grant: str) -> None:
        await self._read(lambda db: _end_grant(db, grant), "IMMEDIATE")

    async def grant_of(self, value: str) -> str | None:
        key = digest(value)
        row = await self._read(
            lambda db: db.execute("SELECT grant_id FROM tokens WHERE hash = ?", (key,)).fetchone()
        )
        return None if row is None else str(row[0])


def _end_grant(db: sqlite3.Connection, grant: str) -> None:
    db.execute("DELETE FROM tokens WHERE grant_id = ?", (grant,))
    db.execute("UPDATE codes SET used = 1 WHERE grant_id = ?", (grant,))


def _token(row: Any) -> IssuedToken:
    kind, grant, client_id, scopes, resource, expires = row
    return IssuedToken(
        kind=kind,
        grant=grant,
        client_id=client_id,
        scopes=scopes.split(),
        resource=resource,
        expires_at=int(expires),
    )
