"""The gateway as the OAuth 2.1 authorization server of its own MCP resource, on the official
MCP SDK's auth module: its authorization, token, registration and revocation handlers
(`create_auth_routes`), with this package's provider (`provider.py`), store (`store.py`),
consent page (`consent.py`) and discovery documents (`metadata.py`).

The routes sit at the root of the app, where RFC 8414 and RFC 9728 discovery looks; the MCP
endpoint itself only verifies tokens (`rest/bearer.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.settings import RevocationOptions
from pydantic import AnyHttpUrl
from starlette.routing import BaseRoute, Route

from ...shared_store import SharedStore
from .client_documents import ClientDocuments
from .consent import CONSENT_PATH, ConsentPage
from .issuer import WithIssuer
from .metadata import (
    RESOURCE_METADATA_PATH,
    registration_options,
    resource_metadata,
    server_metadata,
)
from .provider import GatewayOAuthProvider
from .store import SharedOAuthStore

__all__ = ["ClientDocuments", "GatewayOAuthProvider", "oauth_provider", "oauth_routes"]

_SERVER_METADATA_PATH = "/.well-known/oauth-authorization-server"
# The SDK validates the issuer it is given, which only its metadata route uses; that route is
# replaced by `metadata.server_metadata`, whose issuer is the base each request reached.
_UNUSED_ISSUER = AnyHttpUrl("http://127.0.0.1")


def oauth_provider(
    shared: SharedStore, token_seconds: int, documents: ClientDocuments | None = None
) -> GatewayOAuthProvider:
    """The provider over the deployment's shared store, which every gateway process reads;
    `documents` fetches the clients that describe themselves at a URL."""
    store = SharedOAuthStore(shared)
    return GatewayOAuthProvider(store, token_seconds=token_seconds, documents=documents)


def oauth_routes(provider: GatewayOAuthProvider, keys: Sequence[str]) -> list[BaseRoute]:
    sdk = create_auth_routes(
        provider,
        issuer_url=_UNUSED_ISSUER,
        client_registration_options=registration_options(),
        revocation_options=RevocationOptions(enabled=True),
    )
    kept = [
        _authorization_with_issuer(r) if isinstance(r, Route) and r.path == "/authorize" else r
        for r in sdk
        if not (isinstance(r, Route) and r.path == _SERVER_METADATA_PATH)
    ]
    return [
        *kept,
        Route(_SERVER_METADATA_PATH, server_metadata, methods=["GET"]),
        Route(RESOURCE_METADATA_PATH, resource_metadata, methods=["GET"]),
        # Clients that look for the resource's metadata at the root find the same document.
        Route("/.well-known/oauth-protected-resource", resource_metadata, methods=["GET"]),
        Route(CONSENT_PATH, ConsentPage(provider, keys).handle, methods=["GET", "POST"]),
    ]


def _authorization_with_issuer(route: Route) -> Route:
    """The SDK's authorization endpoint, whose error redirects then name the issuer."""
    return Route(route.path, WithIssuer(route.app), methods=list(route.methods or ()))
