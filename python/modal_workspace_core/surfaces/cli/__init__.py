"""The `modal-workspace` command: `serve` runs the gateway and `token` mints a bearer token; the
other commands drive workspaces from a terminal (create, exec, cp, logs, snapshot, fork, …),
against a gateway by URL or in process on this machine (`app.py` lists them).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...config.client import is_loopback
from .app import app
from .tokens import mint_token

__all__ = ["is_loopback", "main", "mint_token"]


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line (`argv`, else the process's); its exit status."""
    try:
        app(args=list(argv) if argv is not None else None, prog_name="modal-workspace")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
