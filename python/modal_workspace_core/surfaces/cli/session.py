"""One command's run: its client opened for where the command line and environment point, its
work awaited, and every failure said in one line (with `--json`, also as a document on stdout)
and turned into the exit status: 2 for a setting, `failure` (1 unless the command says) for a
refusal, an unreachable gateway or a local file that cannot be read or written, 130 for Ctrl+C.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ...config import ConfigError
from ...errors import WorkspaceError
from .connect import open_client
from .contract import Client, Target
from .output import Output

__all__ = ["Work", "run"]

# What a command does with its client: its exit status.
Work = Callable[[Client, Output], Awaitable[int]]


def run(target: Target, json_mode: bool, work: Work, *, failure: int = 1) -> int:
    out = Output(json_mode)

    async def main() -> int:
        async with open_client(target) as client:
            return await work(client, out)

    try:
        return asyncio.run(main())
    except ConfigError as exc:
        out.error("setting", str(exc))
        return 2
    except WorkspaceError as exc:
        out.error(exc.code, exc.message, exc.field)
        return failure
    except OSError as exc:
        # This machine's side of a copy: a file that cannot be read or written here.
        where = f"{exc.filename}: " if exc.filename else ""
        out.error("local", f"{where}{exc.strerror or exc}")
        return failure
    except KeyboardInterrupt:
        return 130
