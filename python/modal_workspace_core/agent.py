"""The workspace agent's command line: `python -m modal_workspace_core.agent …` or `mwc-agent`.

Everything runs in the compiled core (`agent_main`); this module only hands it the arguments.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ._core import agent_main

# The GIT_ASKPASS program of authenticated git steps: shipped in the package, which sandboxes
# mount read-only, so no workspace command can change what answers git's password prompt.
ASKPASS = Path(__file__).resolve().parent / "git" / "askpass.sh"


def main(argv: list[str] | None = None) -> int:
    """Run `mwc-agent` with `argv` (default: this process's arguments) and return the exit code.
    A daemon is told where the package's askpass program is (and the interpreter it runs the
    agent with), unless the caller says."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:1] == ["daemon"] and not any(a.split("=")[0] == "--askpass" for a in args):
        # The askpass program runs this agent's `askpass` mode with this interpreter.
        args += ["--askpass", str(ASKPASS), "--python", sys.executable]
    return agent_main(args)


if __name__ == "__main__":
    sys.exit(main())
