"""An MCP host's side of the gateway's OAuth flow, as a test drives it: dynamic registration,
the authorization request, the operator at the consent page (a form read and posted like a
browser would, the server's key typed in), and the code at the host's callback."""

from __future__ import annotations

import base64
import hashlib
import html
import re
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

CALLBACK = "http://localhost:3030/callback"


def pkce() -> tuple[str, str]:
    """(verifier, S256 challenge)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass
class Consent:
    """The consent page of one authorization request, as the operator's browser has it."""

    location: str  # where /authorize sent the browser
    page: str

    def field(self, name: str) -> str:
        match = re.search(rf"name={name} value='([^']*)'", self.page)
        assert match is not None, self.page
        return html.unescape(match.group(1))


class OAuthHost:
    """One registered client of the gateway, speaking plain HTTP to it."""

    def __init__(self, http: httpx2.AsyncClient, base: str) -> None:
        self.http, self.base = http, base
        self.client: dict[str, Any] = {}

    async def register(self, **metadata: Any) -> dict[str, Any]:
        body = {
            "redirect_uris": [CALLBACK],
            "client_name": "Test host",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "client_secret_post",
            **metadata,
        }
        response = await self.http.post(f"{self.base}/register", json=body)
        assert response.status_code == 201, response.text
        self.client = response.json()
        return self.client

    def authorization(self, challenge: str, **more: str) -> dict[str, str]:
        """The parameters of an authorization request of this client's."""
        return {
            "response_type": "code",
            "client_id": self.client["client_id"],
            "redirect_uri": CALLBACK,
            "state": "state-123",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "resource": f"{self.base}/mcp",
            **more,
        }

    async def authorize(self, challenge: str, **more: str) -> Consent:
        params = self.authorization(challenge, **more)
        response = await self.http.get(f"{self.base}/authorize?{urlencode(params)}")
        assert response.status_code == 302, response.text
        location = response.headers["location"]
        page = await self.http.get(f"{self.base}{location}")
        assert page.status_code == 200, page.text
        return Consent(location, page.text)

    async def decide(
        self, consent: Consent, key: str, decision: str = "approve"
    ) -> httpx2.Response:
        form = {
            "request": consent.field("request"),
            "csrf": consent.field("csrf"),
            "key": key,
            "decision": decision,
        }
        return await self.http.post(f"{self.base}/oauth/consent", data=form)

    async def code(self, key: str, challenge: str, **more: str) -> str:
        """Authorization, approved with `key`: the code the callback receives."""
        answer = await self.decide(await self.authorize(challenge, **more), key)
        assert answer.status_code == 303, answer.text
        query = callback_query(answer.headers["location"])
        assert query["state"] == "state-123" and query["iss"] == self.base, query
        return query["code"]

    async def token(self, **form: str) -> httpx2.Response:
        credentials = {
            "client_id": self.client["client_id"],
            "client_secret": self.client["client_secret"],
        }
        return await self.http.post(f"{self.base}/token", data={**credentials, **form})

    async def exchange(self, code: str, verifier: str) -> httpx2.Response:
        return await self.token(
            grant_type="authorization_code",
            code=code,
            redirect_uri=CALLBACK,
            code_verifier=verifier,
        )


def callback_query(location: str) -> dict[str, str]:
    """The parameters of a redirect to the host's callback."""
    url = urlsplit(location)
    assert f"{url.scheme}://{url.netloc}{url.path}" == CALLBACK, location
    return {name: values[0] for name, values in parse_qs(url.query).items()}


class MemoryStorage:
    """The SDK client's `TokenStorage`, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


@dataclass
class ApprovingBrowser:
    """The SDK client's redirect and callback handlers, for a host whose operator approves at
    the consent page at once: `open` follows /authorize to the page and posts the approval,
    `callback` answers what the host's callback received."""

    http: httpx2.AsyncClient
    base: str
    key: str
    received: dict[str, str] = field(default_factory=dict)
    page: str = ""

    async def open(self, url: str) -> None:
        sent = await self.http.get(url)
        assert sent.status_code == 302, sent.text
        location = sent.headers["location"]
        assert location.startswith("/oauth/consent"), location
        consent = Consent(location, (await self.http.get(f"{self.base}{location}")).text)
        self.page = consent.page
        form = {"request": consent.field("request"), "csrf": consent.field("csrf")}
        decided = await self.http.post(
            f"{self.base}/oauth/consent", data={**form, "key": self.key, "decision": "approve"}
        )
        assert decided.status_code == 303, decided.text
        self.received.update(callback_query(decided.headers["location"]))

    async def callback(self) -> AuthorizationCodeResult:
        return AuthorizationCodeResult(**self.received)


def sdk_client(
    browser: ApprovingBrowser, storage: MemoryStorage, name: str, **oauth: Any
) -> Client:
    """The official SDK's MCP client on `browser`'s server, signing in with OAuth as a host
    named `name` (`oauth`: more of `OAuthClientProvider`'s arguments)."""
    metadata = OAuthClientMetadata(
        client_name=name,
        redirect_uris=[AnyUrl(CALLBACK)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        **({"token_endpoint_auth_method": "none"} if "client_metadata_url" in oauth else {}),
    )
    auth = OAuthClientProvider(
        server_url=f"{browser.base}/mcp",
        client_metadata=metadata,
        storage=storage,
        redirect_handler=browser.open,
        callback_handler=browser.callback,
        **oauth,
    )
    http = httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(30, read=60))
    return Client(streamable_http_client(f"{browser.base}/mcp/", http_client=http))
