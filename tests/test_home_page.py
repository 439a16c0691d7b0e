"""The page at `/`: a person who opens the server's address learns what it is and where its
endpoints and documentation are, without a token; plain HTML with no script, every value from
the request escaped, and nothing that could frame or run it."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from fastapi import FastAPI
from modal_workspace_core import __version__
from modal_workspace_core.config import load_settings
from modal_workspace_core.operations import new_service
from modal_workspace_core.surfaces.rest.app import create_app
from service_support import TOKEN, RecordingDriver
from support.asgi_request import request

ENDPOINTS = (
    "/mcp/",
    "/api",
    "/openapi.json",
    "/action-openapi.json",
    "/healthz",
    "/.well-known/oauth-authorization-server",
)


def app_with(env: dict[str, str] | None = None) -> FastAPI:
    return create_app(new_service(RecordingDriver(), load_settings(env or {})), [TOKEN])


@pytest.fixture(scope="module")
def app() -> FastAPI:
    return app_with()


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.links: list[str] = []
        self.handlers: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.links += [v or "" for k, v in attrs if k == "href"]
        self.handlers += [k for k, _ in attrs if k.startswith("on")]


def parsed(body: bytes) -> Tags:
    tags = Tags()
    tags.feed(body.decode())
    return tags


async def test_the_page_says_what_the_server_is_and_where_everything_is_without_a_token(
    app: FastAPI,
) -> None:
    status, headers, body = await request(app, "GET", "/", headers=[(b"host", b"gw.test:8765")])
    assert status == 200
    assert headers[b"content-type"].startswith(b"text/html")
    text = body.decode()
    assert "modal-workspace" in text and __version__ in text and "recording" in text
    for path in ENDPOINTS:
        assert f"http://gw.test:8765{path}" in text, path
    assert "README.md" in text
    # The pages a browser can open without the token are links; the token's are not.
    assert set(parsed(body).links) == {
        "/openapi.json",
        "/action-openapi.json",
        "/healthz",
        "/.well-known/oauth-authorization-server",
    }


async def test_the_page_is_plain_html_that_nothing_can_frame_or_script(app: FastAPI) -> None:
    _, headers, body = await request(app, "GET", "/", headers=[(b"host", b"127.0.0.1")])
    tags = parsed(body)
    assert not {"script", "iframe", "form", "img", "link", "style"} & set(tags.tags)
    assert tags.handlers == []
    policy = headers[b"content-security-policy"].decode()
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
    assert headers[b"x-frame-options"] == b"DENY"
    assert headers[b"x-content-type-options"] == b"nosniff"
    assert headers[b"cross-origin-opener-policy"] == b"same-origin"


async def test_a_hostile_host_header_is_shown_escaped(app: FastAPI) -> None:
    host = b'x"><script>alert(1)</script>'
    status, _, body = await request(app, "GET", "/", headers=[(b"host", host)])
    assert status == 200
    text = body.decode()
    assert "<script" not in text and "script" not in parsed(body).tags
    assert "x&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;/mcp/" in text


async def test_the_configured_public_url_is_the_one_shown() -> None:
    app = app_with({"MODAL_WORKSPACE_PUBLIC_URL": "https://gw.example.com"})
    _, _, body = await request(app, "GET", "/", headers=[(b"host", b"127.0.0.1:8000")])
    text = body.decode()
    assert "https://gw.example.com/mcp/" in text
    assert not re.search(r"127\.0\.0\.1", text)
