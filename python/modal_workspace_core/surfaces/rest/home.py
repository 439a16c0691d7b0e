"""The page at `/`: what this server is and where its endpoints and documentation are, for a
person who opens its address in a browser. Plain HTML without script; every value escaped."""

from __future__ import annotations

from html import escape

from starlette.responses import HTMLResponse

__all__ = ["home_page"]

# The page only shows text and links: nothing may load, run, submit or frame it.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # A page of another origin (a workspace's preview among them) that opens this one keeps
    # no handle on it.
    "Cross-Origin-Opener-Policy": "same-origin",
}

# (path, open, what it is): each shown with the full URL a client is given; linked where a
# browser can open it without the token.
_ENDPOINTS = (
    (
        "/mcp/",
        False,
        "MCP (Streamable HTTP): add it to an MCP client with the header "
        "<code>Authorization: Bearer &lt;token&gt;</code>, or as a custom connector in "
        "claude.ai, Claude Desktop or a ChatGPT app, which sign in with OAuth (the operator "
        "approves each).",
    ),
    (
        "/.well-known/oauth-authorization-server",
        True,
        "OAuth 2.1 discovery: this server is the authorization server of its MCP endpoint.",
    ),
    (
        "/api",
        False,
        "REST API, under <code>/api/</code> (for example <code>GET /api/workspaces</code>), "
        "with the same bearer token.",
    ),
    (
        "/openapi.json",
        True,
        "The REST API's OpenAPI schema: every operation, its fields and errors.",
    ),
    (
        "/action-openapi.json",
        True,
        "The schema for GPT Actions: import it in a GPT, authentication API key, Bearer.",
    ),
    ("/healthz", True, "Health: whether the server is up, its driver and version (JSON)."),
)


def home_page(base_url: str, driver: str, version: str) -> HTMLResponse:
    """The page for a server reached at `base_url` (as the request named it, or the configured
    public URL), serving with `driver`."""
    base = base_url.rstrip("/")
    rows = "\n".join(
        f"<li>{_url(base, path, linked)}: {what}</li>" for path, linked, what in _ENDPOINTS
    )
    page = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>modal-workspace {escape(version)}</title>
</head>
<body>
<h1>modal-workspace {escape(version)}</h1>
<p>A gateway to remote workspaces for AI agents (modal-workspace-mcp): each workspace is a
machine with a root, <code>/workspace</code>, where an agent clones a GitHub repository, runs
commands with live output, reads and edits files and delivers its work. This server runs its
workspaces on the <strong>{escape(driver)}</strong> driver.</p>
<h2>Endpoints</h2>
<ul>
{rows}
</ul>
<p>Every <code>/api</code> and <code>/mcp/</code> request needs the server's bearer token; the
linked pages need none. The operator sets the token
(<code>MODAL_WORKSPACE_MCP_TOKEN</code>), or a local server mints one at start and prints it.</p>
<h2>Documentation</h2>
<p>The modal-workspace-mcp project's <code>README.md</code> says how to serve, connect a client
(MCP hosts, GPT Actions, the Python API) and use every operation; its <code>docs/</code> folder
holds the architecture, the security model and the Modal deployment.</p>
</body>
</html>
"""
    return HTMLResponse(page, headers=_HEADERS)


def _url(base: str, path: str, linked: bool) -> str:
    shown = f"<code>{escape(base + path)}</code>"
    return f'<a href="{escape(path)}">{shown}</a>' if linked else shown
