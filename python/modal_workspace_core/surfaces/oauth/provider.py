"""The gateway as the authorization server of its own MCP resource: the official MCP SDK's
`OAuthAuthorizationServerProvider`, over an `OAuthStore`.

An authorization waits for the operator's consent (`consent.py`); only a consent mints a code.
Codes are single-use and live five minutes; PKCE (S256) and the exact redirect are checked by
the SDK's token handler. Access tokens are opaque, long-lived by default (hosts such as
claude.ai rarely refresh) and looked up on every request, so a revocation holds at once; a
refresh token is used once and rotates the grant's tokens. Every token is bound to the resource
it was asked for (this server's `/mcp`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    IdentityAssertionParams,
    RefreshToken,
    RegistrationError,
    TokenError,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from ...runtime.call import FULL_SCOPE, LINK_BASE, READ_SCOPE
from .client_documents import ClientDocuments, is_document_id
from .store import IssuedToken, OAuthStore

__all__ = [
    "FULL_SCOPE",
    "READ_SCOPE",
    "SCOPES",
    "GatewayOAuthProvider",
    "mcp_resource",
    "same_resource",
]

SCOPES = [READ_SCOPE, FULL_SCOPE]

CODE_SECONDS = 300
CONSENT_SECONDS = 600
REFRESH_SECONDS = 365 * 24 * 3600
# Dynamic registration (RFC 7591) is open to anyone who reaches the server: at most this many
# clients a minute.
REGISTRATIONS_PER_MINUTE = 20
# And so is asking for a consent: at most this many wait at once (each for CONSENT_SECONDS).
MAX_PENDING = 500


def mcp_resource(base: str) -> str:
    """The resource a token is for: this server's MCP endpoint as a client names it."""
    return f"{base.rstrip('/')}/mcp"


def same_resource(named: str | None, base: str) -> bool:
    """A resource as a client wrote it names this server's MCP endpoint (a trailing slash and
    the case of the scheme and host aside)."""
    return named is not None and _normal(named) == _normal(mcp_resource(base))


def _normal(url: str) -> str:
    scheme, _, rest = url.partition("://")
    host, _, path = rest.partition("/")
    return f"{scheme.lower()}://{host.lower()}/{path}".rstrip("/")


class GatewayOAuthProvider:
    """`OAuthAuthorizationServerProvider` for the gateway's own tokens."""

    def __init__(
        self,
        store: OAuthStore,
        *,
        token_seconds: int,
        documents: ClientDocuments | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.token_seconds = token_seconds
        self.documents = documents or ClientDocuments()
        self.clock = clock

    # --- clients ----------------------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        if not 0 < len(client_id) <= 2048:
            return None
        if is_document_id(client_id):
            # A client that describes itself at its id's URL (`client_documents.py`).
            client = await self.documents.client(client_id)
            redirects = client.redirect_uris or [] if client is not None else []
            if client is None or not all(_acceptable_redirect(str(uri)) for uri in redirects):
                return None
            return client
        info = await self.store.get_client(client_id)
        return None if info is None else OAuthClientInformationFull.model_validate_json(info)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        for uri in client_info.redirect_uris or []:
            if not _acceptable_redirect(str(uri)):
                raise RegistrationError(
                    "invalid_redirect_uri",
                    f"{str(uri)[:200]}: a redirect must be https, or http on a loopback address",
                )
        recent = await self.store.clients_registered_since(self.clock() - 60)
        if recent >= REGISTRATIONS_PER_MINUTE:
            raise RegistrationError(
                "invalid_client_metadata",
                "too many clients registered in the last minute: try again in a minute",
            )
        assert client_info.client_id is not None  # the SDK's handler minted it
        await self.store.put_client(client_info.client_id, client_info.model_dump_json())

    # --- authorization ----------------------------------------------------------------------

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        """Keeps the request until the operator consents, and sends the browser to the page
        that asks (a path on this server, as the request reached it)."""
        base = LINK_BASE.get() or ""
        if params.resource is not None and not same_resource(params.resource, base):
            raise AuthorizeError("invalid_target", "resource: this server's resource is its /mcp")
        if await self.store.pending_count() >= MAX_PENDING:
            raise AuthorizeError(
                "temporarily_unavailable", "too many authorizations wait for consent: try later"
            )
        request_id = secrets.token_urlsafe(24)
        record = {
            "client_id": client.client_id,
            "client_name": client.client_name,
            "params": params.model_dump(mode="json"),
            "csrf": secrets.token_urlsafe(24),
            "base": base,
        }
        await self.store.put_pending(request_id, record, self.clock() + CONSENT_SECONDS)
        return f"/oauth/consent?request={request_id}"

    async def consent(self, record: dict[str, Any]) -> str:
        """A code for the authorization the operator approved; answers the code."""
        params = AuthorizationParams.model_validate(record["params"])
        code = secrets.token_urlsafe(32)
        grant = secrets.token_urlsafe(16)
        data = {
            "client_id": record["client_id"],
            "scopes": params.scopes or [FULL_SCOPE],
            "code_challenge": params.code_challenge,
            "redirect_uri": str(params.redirect_uri),
            "redirect_uri_provided_explicitly": params.redirect_uri_provided_explicitly,
            "resource": params.resource or mcp_resource(record["base"]),
        }
        await self.store.put_code(code, grant, data, self.clock() + CODE_SECONDS)
        return code

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        record = await self.store.get_code(authorization_code)
        if record is None or record["client_id"] != client.client_id:
            return None
        return AuthorizationCode(
            code=authorization_code,
            expires_at=self.clock() + CODE_SECONDS,  # unexpired: the store answers no other
            **record,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        grant = await self.store.use_code(authorization_code.code)
        if grant is None:
            raise TokenError("invalid_grant", "authorization code was already used")
        assert client.client_id is not None
        return await self._issue(
            grant, client.client_id, authorization_code.scopes, authorization_code.resource
        )

    # --- refresh ----------------------------------------------------------------------------

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        held = await self.store.get_token(refresh_token, "refresh")
        if held is None or held.client_id != client.client_id:
            return None
        return RefreshToken(
            token=refresh_token,
            client_id=held.client_id,
            scopes=held.scopes,
            expires_at=held.expires_at,
            resource=held.resource,
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        held = await self.store.take_token(refresh_token.token, "refresh")
        if held is None:
            raise TokenError("invalid_grant", "refresh token was already used")
        # Rotation: the grant's earlier tokens end with the refresh that replaces them.
        await self.store.end_grant(held.grant)
        return await self._issue(held.grant, held.client_id, scopes, held.resource)

    # --- access -----------------------------------------------------------------------------

    async def load_access_token(self, token: str) -> AccessToken | None:
        held = await self.store.get_token(token, "access")
        if held is None:
            return None
        return AccessToken(
            token=token,
            client_id=held.client_id,
            scopes=held.scopes,
            expires_at=held.expires_at,
            resource=held.resource,
        )

    async def verify_token(self, token: str) -> AccessToken | None:
        """The SDK's `TokenVerifier`, for the MCP server's own checks."""
        return await self.load_access_token(token)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        grant = await self.store.grant_of(token.token)
        if grant is not None:
            await self.store.end_grant(grant)

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: IdentityAssertionParams
    ) -> OAuthToken:
        """Not offered: the ID-JAG grant (SEP-990) is for enterprise identity providers."""
        raise TokenError("unsupported_grant_type", "this server issues tokens by consent only")

    async def _issue(
        self, grant: str, client_id: str, scopes: Sequence[str], resource: str | None
    ) -> OAuthToken:
        now = int(self.clock())
        access, refresh = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        for value, kind, lifetime in (
            (access, "access", self.token_seconds),
            (refresh, "refresh", REFRESH_SECONDS),
        ):
            issued = IssuedToken(
                kind=kind,
                grant=grant,
                client_id=client_id,
                scopes=list(scopes),
                resource=resource,
                expires_at=now + lifetime,
            )
            await self.store.put_token(value, issued)
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=self.token_seconds,
            scope=" ".join(scopes),
            refresh_token=refresh,
        )


def _acceptable_redirect(uri: str) -> bool:
    scheme, _, rest = uri.partition("://")
    host = rest.split("/", 1)[0].rsplit("@", 1)[-1]
    if scheme == "https":
        return True
    if scheme == "http":
        name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        return name in ("localhost", "127.0.0.1", "[::1]")
    return False
