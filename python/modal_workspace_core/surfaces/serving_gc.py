"""The garbage collector of a process that serves the gateway, set for many parked requests.

A long-poll that waits holds its request's objects (its scope, coroutines, futures, timers) for
up to its whole wait; with a thousand of them parked on one exec, CPython's default collector
(a young collection every 700 container allocations, and the old generation scanned again and
again) spent a large share of the gateway's CPU walking objects that were all alive, in the
very moments a line woke every poller (bench/README.md, "Many pollers"). So the process, once
it has imported and built everything it serves with, moves those objects out of the collector's
sight (`gc.freeze`: they live as long as the process) and collects the young generation less
often. Reference counting still frees everything that is not in a cycle at once; what is in a
cycle waits for at most `YOUNG_ALLOCATIONS` more allocations.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_ALLOCATIONS", "settle_for_serving"]

# Container allocations (net of frees) between two collections of the youngest generation
# (CPython's default is 700); the older ones keep the ratios below.
YOUNG_ALLOCATIONS = 50_000
_MIDDLE_EVERY = 20
_OLDEST_EVERY = 100


def settle_for_serving() -> None:
    """Called once the serving process has built its app, just before it serves: only for a
    process the gateway owns (`modal-workspace serve`, the Modal web function), never from a
    library call, since the collector is the whole process's."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_ALLOCATIONS, _MIDDLE_EVERY, _OLDEST_EVERY)
