"""The `modal-workspace` command: `serve` runs the gateway (REST, GPT Actions, MCP) on a driver,
`token` mints a bearer token.

A server without a configured token runs only on loopback with the local driver, where a token
is minted for the run and printed for the person who started it.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Sequence

from .. import __version__
from ..config import TOKEN_ENV, TOKEN_FILE_ENV, ConfigError, load_settings
from ..config.gateway import PREVIEW_HOST_ENV, is_loopback, preview_zone
from ..errors import WorkspaceError

__all__ = ["main", "mint_token"]


def mint_token() -> str:
    """A fresh bearer token: 256 bits from the OS's random source, URL-safe."""
    return secrets.token_urlsafe(32)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="modal-workspace",
        description="Remote workspaces for AI agents: REST (GPT Actions), MCP and Python.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run the gateway",
        description=(
            f"Run the gateway. Bearer tokens come from {TOKEN_ENV} (comma-separated) or "
            f"{TOKEN_FILE_ENV}; without one, the server runs only on loopback with the local "
            "driver and mints a token for the run."
        ),
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    serve.add_argument(
        "--driver",
        choices=("local", "modal"),
        default=None,
        help="workspace driver (default local)",
    )
    serve.add_argument(
        "--data-root",
        default=None,
        help="where the local driver keeps workspaces (default: the user's data directory)",
    )
    sub.add_parser("token", help="mint a bearer token and print it")
    return parser


def _serve(args: argparse.Namespace) -> int:
    # Imported only to serve, on purpose: `modal-workspace token` needs none of the server
    # (FastAPI, the MCP server, the drivers) and starts without loading it.
    from ..operations import open_service
    from .http_listen import ListenError, listen
    from .http_serving import serve
    from .rest.app import create_app

    try:
        settings = load_settings(driver=args.driver, data_root=args.data_root)
    except ConfigError as exc:
        print(f"modal-workspace: {exc}", file=sys.stderr)
        return 2
    tokens = list(settings.tokens)
    if not tokens and (not is_loopback(args.host) or settings.driver != "local"):
        print(
            f"modal-workspace: refusing to serve on {args.host} with the {settings.driver} "
            f"driver without a token: set {TOKEN_ENV} (mint one with "
            "`modal-workspace token`) or a token file in "
            f"{TOKEN_FILE_ENV}",
            file=sys.stderr,
        )
        return 2
    # The port first: a server that cannot listen says so alone, before a token is minted
    # and a banner printed for a server that will never run.
    try:
        sockets = listen(args.host, args.port)
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
    app = create_app(service, tokens, host=args.host, allowed_hosts=settings.allowed_hosts)
    host = f"[{args.host}]" if ":" in args.host else args.host
    base = f"http://{host}:{args.port}"
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
        zone = preview_zone(settings, args.host)
        lines.append(
            f"  previews:       http://p-<workspace>-<port>.{zone}:{args.port}/…"
            if zone
            else f"  previews:       off (set {PREVIEW_HOST_ENV}: a name whose subdomains reach "
            "this server)"
        )
    print("\n".join(lines), flush=True)
    serve(app, sockets, on_stop=service.end_waits)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "token":
        print(mint_token())
        return 0
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())
