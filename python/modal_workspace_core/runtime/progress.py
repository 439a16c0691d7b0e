"""Progress for work that has none of its own (Modal building an image inside a create call,
a workspace starting from a snapshot): the caller's progress reporter hears that it began, every
few seconds that it still goes on (an MCP client that resets its timeout on progress keeps
waiting), and that it ended. Nothing when the call has no reporter.

A leaf module beside `call`: the drivers use it as the operations do.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from .call import PROGRESS

__all__ = ["EVERY_SECONDS", "reported_while"]

# How often work under way says it still is.
EVERY_SECONDS = 5.0


@contextlib.asynccontextmanager
async def reported_while(
    begun: str, going: str, ended: str, every: float = EVERY_SECONDS
) -> AsyncIterator[None]:
    """Around the block: `begun` first, then every `every` seconds `going` with the seconds so
    far (`{seconds}` in it), and `ended` once the block returned (not when it raised: the
    caller's answer says why). The progress value is the seconds elapsed, so it never goes back."""
    report = PROGRESS.get()
    if report is None:
        yield
        return
    started = time.monotonic()
    await report(0.0, begun)

    async def beat() -> None:
        while True:
            await asyncio.sleep(every)
            elapsed = time.monotonic() - started
            await report(elapsed, going.format(seconds=f"{elapsed:.0f}"))

    ticker = asyncio.get_running_loop().create_task(beat())
    try:
        yield
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    await report(time.monotonic() - started, ended)
