"""The consent page: where the operator approves (or refuses) a client's request for a token.
No consent, no code.

Plain HTML that works without JavaScript. The page names the client (as it registered itself:
escaped, and said to be its own words), where the browser will be sent, and the scopes asked
for. Approving takes one of the operator's static keys, typed into the form: whoever reaches
the page without one can only refuse. The form carries the request's CSRF value, which appears
nowhere but on this page (not in the URL the client redirected the browser to), and the page
refuses to be framed, so another site can neither read it nor submit it for the operator.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.provider import construct_redirect_uri
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ...runtime.call import FULL_SCOPE, READ_SCOPE
from ..keys import key_matches
from .provider import GatewayOAuthProvider

__all__ = ["CONSENT_PATH", "ConsentPage"]

CONSENT_PATH = "/oauth/consent"

_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    # No script, no frame, no other origin's content; the form posts here (a redirect to the
    # client follows, which a `form-action` directive would block in some browsers).
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    # No Cross-Origin-Opener-Policy: a client that opens the sign-in in a popup learns its end
    # through the window that opened it, which `same-origin` would cut off on the way here.
}

_SCOPE_WORDS = {
    READ_SCOPE: "read workspaces: list them, read files, follow output",
    FULL_SCOPE: "use workspaces fully: create and delete them, run commands, write files, "
    "push to GitHub",
}

# The most a form field may hold: a key, a request id, a CSRF value.
_FIELD_CHARS = 4096
# Wrong keys a request takes before it ends.
KEY_TRIES = 3


class ConsentPage:
    """GET shows the request; POST takes the operator's decision."""

    def __init__(self, provider: GatewayOAuthProvider, keys: Sequence[str]) -> None:
        self.provider = provider
        self.keys = [key.encode() for key in keys]

    async def handle(self, request: Request) -> Response:
        if request.method == "POST":
            return await self.decide(request)
        return await self.show(request)

    async def show(self, request: Request, problem: str = "", status: int = 200) -> Response:
        request_id = request.query_params.get("request", "")[:_FIELD_CHARS]
        record = await self.provider.store.get_pending(request_id) if request_id else None
        if record is None:
            return _page(_EXPIRED, 404)
        return _page(_form(request_id, record, problem), status)

    async def decide(self, request: Request) -> Response:
        form = await request.form(max_files=0, max_fields=8)
        fields = {name: _text(form.get(name)) for name in ("request", "csrf", "key", "decision")}
        record = await self.provider.store.get_pending(fields["request"])
        if record is None:
            return _page(_EXPIRED, 404)
        if not key_matches(fields["csrf"].encode(), [record["csrf"].encode()]):
            return _page(_EXPIRED, 403)
        approve = fields["decision"] == "approve"
        if approve and not key_matches(fields["key"].encode(), self.keys):
            # A few tries for a typo; then the request ends, and guessing the key takes a new
            # authorization for every few tries (of which only so many may wait at once).
            if not await self.provider.store.fail_pending(fields["request"], KEY_TRIES):
                return _page(_ENDED_BY_TRIES, 403)
            problem = "That is not one of this server's keys."
            return _page(_form(fields["request"], record, problem), 403)
        # Taken once: a second decision on the same request finds nothing.
        record = await self.provider.store.take_pending(fields["request"])
        if record is None:
            return _page(_EXPIRED, 404)
        params = record["params"]
        answer: dict[str, Any] = {"state": params.get("state"), "iss": record["base"]}
        if approve:
            answer["code"] = await self.provider.consent(record)
        else:
            answer["error"] = "access_denied"
            answer["error_description"] = "the operator refused"
        target = construct_redirect_uri(params["redirect_uri"], **answer)
        return RedirectResponse(target, status_code=303, headers=_HEADERS)


def _text(value: Any) -> str:
    return value[:_FIELD_CHARS] if isinstance(value, str) else ""


def _page(body: str, status: int) -> HTMLResponse:
    document = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        "<title>Connect to modal-workspace</title>"
        f"<style>{_STYLE}</style></head><body><main>{body}</main></body></html>"
    )
    return HTMLResponse(document, status_code=status, headers=_HEADERS)


def _form(request_id: str, record: dict[str, Any], problem: str) -> str:
    params = record["params"]
    client = html.escape(str(record.get("client_name") or record["client_id"])[:200])
    target = urlsplit(str(params["redirect_uri"]))
    where = html.escape(f"{target.scheme}://{target.netloc}"[:300])
    scopes = params.get("scopes") or [FULL_SCOPE]
    asked = "".join(f"<li>{html.escape(_SCOPE_WORDS.get(scope, scope))}</li>" for scope in scopes)
    warning = f"<p class=problem role=alert>{html.escape(problem)}</p>" if problem else ""
    return (
        "<h1>Connect to modal-workspace</h1>"
        f"<p>An application that calls itself <strong>{client}</strong> asks for access to "
        "this server's workspaces. (That name is the application's own words.)</p>"
        f"<p>If you approve, your browser goes back to <code>{where}</code> with a code that "
        "gives it:</p>"
        f"<ul>{asked}</ul>"
        f"{warning}"
        f"<form method=post action='{CONSENT_PATH}'>"
        f"<input type=hidden name=request value='{html.escape(request_id, quote=True)}'>"
        f"<input type=hidden name=csrf value='{html.escape(record['csrf'], quote=True)}'>"
        "<label for=key>This server's key (the operator's MCP token)</label>"
        "<input id=key name=key type=password autocomplete=off>"
        "<div class=buttons>"
        "<button type=submit name=decision value=approve>Approve</button>"
        "<button type=submit name=decision value=deny class=secondary>Refuse</button>"
        "</div></form>"
    )


_EXPIRED = (
    "<h1>This request has ended</h1><p>It was decided already, or it expired. Start again "
    "from the application that asked.</p>"
)

_ENDED_BY_TRIES = (
    "<h1>This request has ended</h1><p>The key was wrong too many times. Start again from the "
    "application that asked.</p>"
)

_STYLE = (
    "body{font-family:system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2127}"
    "main{max-width:34rem;margin:3rem auto;padding:2rem;background:#fff;border-radius:12px;"
    "box-shadow:0 1px 4px #0002}h1{font-size:1.4rem;margin-top:0}"
    "label{display:block;margin-top:1rem;font-weight:600}"
    "input[type=password]{width:100%;box-sizing:border-box;padding:.6rem;margin-top:.4rem;"
    "font-size:1rem}.buttons{margin-top:1.2rem;display:flex;gap:.8rem}"
    "button{padding:.6rem 1.2rem;font-size:1rem;border-radius:8px;border:0;background:#2557d6;"
    "color:#fff;cursor:pointer}button.secondary{background:#e4e7ec;color:#1d2127}"
    ".problem{color:#b42318;font-weight:600}code{background:#eef0f3;padding:0 .3rem}"
)
