"""`modal-workspace serve` runs the gateway (REST, GPT Actions, MCP) on a driver; `modal-workspace
token` mints a bearer token.

A server without a configured token runs only on loopback with the local driver, where a token
is minted for the run and printed for the person who started it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ... import __version__
from ...config import TOKEN_ENV, TOKEN_FILE_ENV, ConfigError, load_settings
from ...config.gateway import PREVIEW_HOST_ENV, preview_zone
from ...config.reading import is_loopback
from ...errors import WorkspaceError
from .tokens import mint_token

__all__ = ["serve"]


def serve(host: str, port: int, driver: str | None, data_root: Path | None) -> int:
    """Serves until stopped; the exit status (2: a setting, the port or the driver is wrong)."""
    # Imported only to serve, on purpose: `modal-workspace token` needs none of the server
    # (FastAPI, the MCP server, the drivers) and starts without loading it.
    from ...operations import open_service
    from ..http_listen import ListenError, listen
    from ..http_serving import serve as serve_app
    from ..rest.app import create_app

    try:
        settings = load_settings(driver=driver, data_root=data_root)
    except ConfigError as exc:
        print(f"modal-workspace: {exc}", file=sys.stderr)
        return 2
    tokens = list(settings.tokens)
    if not tokens and (not is_loopback(host) or settings.driver != "local"):
        print(
            f"modal-workspace: refusing to serve on {host} with the {settings.driver} "
            f"driver without a token: set {TOKEN_ENV} (mint one with "
            "`modal-workspace token`) or a token file in "
            f"{TOKEN_FILE_ENV}",
            file=sys.stderr,
        )
        return 2
    # The port first: a server that cannot listen says so alone, before a token is minted
    # and a banner printed for a server that will never run.
    try:
        sockets = listen(host, port)
    except ListenError as exc:
        print(f"modal-workspace: {exc}", file=sys.stderr)
        return 2
    minted = None
    if not tokens:
        minted = mint_token()
        tokens = [minted]
    try:
        service = open_service(settings)
    except WorkspaceError as exc:
        # A driver checks its own settings (isolation, the Modal ones) when it starts: say what
        # is wrong in one line, as for the settings above, instead of a traceback.
        print(
            f"modal-workspace: cannot start the {settings.driver} driver: {exc.message}",
            file=sys.stderr,
        )
        return 2
    app = create_app(service, tokens, host=host, allowed_hosts=settings.allowed_hosts)
    host = f"[{host}]" if ":" in host else host
    base = f"http://{host}:{port}"
    lines = [
        f"modal-workspace {__version__}: serving on {base} (driver: {settings.driver}, "
        f"data root: {settings.data_root})",
    ]
    if minted:
        lines += [
            f"  token:          minted for this run (no {TOKEN_ENV} set): {minted}",
            f"                  keep it across restarts with: export {TOKEN_ENV}={minted}",
        ]
    else:
        lines.append(f"  token:          from {settings.token_source}")
    describe = getattr(service.driver, "describe_isolation", None)
    if describe is not None:
        # The local driver's own word on how commands are contained.
        lines += describe()
    lines += [
        f"  REST:           {base}/api/workspaces   (Authorization: Bearer <token>)",
        f"  MCP:            {base}/mcp/",
        f"  Actions schema: {base}/action-openapi.json",
        f"  health:         {base}/healthz",
    ]
    if settings.driver == "local":
        zone = preview_zone(settings, host)
        lines.append(
            f"  previews:       http://p-<workspace>-<port>.{zone}:{port}/…"
            if zone
            else f"  previews:       off (set {PREVIEW_HOST_ENV}: a name whose subdomains reach "
            "this server)"
        )
    print("\n".join(lines), flush=True)
    serve_app(app, sockets, on_stop=service.end_waits)
    return 0
