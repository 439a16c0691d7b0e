"""The discovery documents of the gateway's authorization server, made per request for the base
URL the request reached the gateway by (the settings' public URL when set): RFC 9728's protected
resource metadata for `/mcp`, and RFC 8414's authorization server metadata.

The RFC 8414 document is the SDK's (`build_metadata`) with what hosts need and the SDK leaves
out: `none` among the token endpoint's methods (public clients),
`client_id_metadata_document_supported` (Claude uses Client ID Metadata Documents only when it
and `none` are both there: `client_documents.py`), and
`authorization_response_iss_parameter_supported` (RFC 9207: ChatGPT's stable callback checks
the `iss` of the authorization response, which the consent adds). The issuer is the base as it
is, without a trailing slash: RFC 8414 compares issuers as strings.
"""

from __future__ import annotations

from typing import Any

from mcp.server.auth.routes import build_metadata
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from pydantic import AnyHttpUrl
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...runtime.call import LINK_BASE
from .provider import SCOPES, mcp_resource

__all__ = [
    "RESOURCE_METADATA_PATH",
    "can_issue",
    "registration_options",
    "resource_metadata",
    "resource_metadata_url",
    "server_metadata",
]

RESOURCE_METADATA_PATH = "/.well-known/oauth-protected-resource/mcp"
_AUTH_METHODS = ["client_secret_post", "client_secret_basic", "none"]


def registration_options() -> ClientRegistrationOptions:
    return ClientRegistrationOptions(
        enabled=True, valid_scopes=list(SCOPES), default_scopes=list(SCOPES)
    )


def can_issue(base: str | None) -> bool:
    """OAuth needs an https issuer; plain http only on a loopback address (RFC 8414 allows it
    for tests and local use)."""
    if not base:
        return False
    scheme, _, rest = base.partition("://")
    host = rest.split("/", 1)[0]
    name = host.split("]")[0] + "]" if host.startswith("[") else host.rsplit(":", 1)[0]
    return scheme == "https" or (scheme == "http" and name in ("localhost", "127.0.0.1", "[::1]"))


def resource_metadata_url(base: str) -> str:
    return base.rstrip("/") + RESOURCE_METADATA_PATH


def _base_or_refusal() -> tuple[str, Response | None]:
    base = (LINK_BASE.get() or "").rstrip("/")
    if can_issue(base):
        return base, None
    refusal = JSONResponse(
        {
            "error": "not_found",
            "error_description": "OAuth needs this server behind https (set "
            "MODAL_WORKSPACE_PUBLIC_URL to its https address), or a loopback address",
        },
        status_code=404,
    )
    return base, refusal


async def resource_metadata(_: Request) -> Response:
    base, refusal = _base_or_refusal()
    if refusal is not None:
        return refusal
    document = {
        "resource": mcp_resource(base),
        "authorization_servers": [base],
        "scopes_supported": list(SCOPES),
        "bearer_methods_supported": ["header"],
        "resource_name": "modal-workspace",
    }
    return JSONResponse(document, headers={"Cache-Control": "public, max-age=300"})


async def server_metadata(_: Request) -> Response:
    base, refusal = _base_or_refusal()
    if refusal is not None:
        return refusal
    metadata = build_metadata(
        AnyHttpUrl(base),
        None,
        registration_options(),
        RevocationOptions(enabled=True),
    )
    document: dict[str, Any] = metadata.model_dump(mode="json", exclude_none=True)
    document.update(
        issuer=base,
        authorization_endpoint=f"{base}/authorize",
        token_endpoint=f"{base}/token",
        registration_endpoint=f"{base}/register",
        revocation_endpoint=f"{base}/revoke",
        token_endpoint_auth_methods_supported=_AUTH_METHODS,
        revocation_endpoint_auth_methods_supported=_AUTH_METHODS,
        authorization_response_iss_parameter_supported=True,
        client_id_metadata_document_supported=True,
    )
    return JSONResponse(document, headers={"Cache-Control": "public, max-age=300"})
