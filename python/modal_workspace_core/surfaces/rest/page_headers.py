"""The headers of every page the gateway serves to people behind a ticket (a run's, a
terminal's) and of everything those pages load: one policy, so that a page added later is held
to it as well."""

from __future__ import annotations

__all__ = ["TICKETED_PAGE_HEADERS"]

TICKETED_PAGE_HEADERS = {
    # Only this gateway's script, style, pictures, JSON and sockets ('self' takes ws: and wss:
    # of the same host); no inline script, no frames, no forms, no plugins.
    "Content-Security-Policy": "default-src 'self'; img-src 'self'; script-src 'self'; "
    "style-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    # The ticket is in the page's URL: no request the page makes may carry it elsewhere.
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "X-Robots-Tag": "noindex, nofollow",
    "Cross-Origin-Resource-Policy": "same-origin",
    # A page of another origin (a workspace's preview among them) that opens this one keeps
    # no handle on it.
    "Cross-Origin-Opener-Policy": "same-origin",
}
