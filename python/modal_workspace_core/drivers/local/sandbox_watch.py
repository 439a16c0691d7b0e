"""Ends a workspace's pasta when the workspace's sandbox ends, whatever ended it (a command that
killed its agent, a crash, the kernel), and whether or not a gateway runs then.

The gateway starts it beside each sandbox that has a network, in a session of its own (it
outlives the gateway as the sandbox does): `python -I -S sandbox_watch.py SANDBOX PASTA`, both
arguments pidfds the gateway opened and checked and passed down (the sandbox's init while bwrap
still held it, before it ran anything; pasta by its pid file and command line), so no reused pid
is ever signalled. It exits once either process has ended. A script of the standard library
alone: it imports nothing of the package and runs without `site`, to stay small.
"""

from __future__ import annotations

import contextlib
import select
import signal
import sys


def watch(sandbox: int, helper: int) -> None:
    """Waits until the process of pidfd `sandbox` or of pidfd `helper` ends; in the first case
    kills the helper."""
    poller = select.poll()
    poller.register(sandbox, select.POLLIN)
    poller.register(helper, select.POLLIN)
    while True:
        ready = {fd for fd, _ in poller.poll()}
        if sandbox in ready:
            with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
                signal.pidfd_send_signal(helper, signal.SIGKILL)
            return
        if helper in ready:
            return


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not all(a.isdigit() for a in argv[1:]):
        print("usage: sandbox_watch.py SANDBOX-PIDFD HELPER-PIDFD", file=sys.stderr)
        return 2
    watch(int(argv[1]), int(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
