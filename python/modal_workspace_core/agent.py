"""The workspace agent's command line: `python -m modal_workspace_core.agent …` or `mwc-agent`.

Everything runs in the compiled core (`agent_main`); this module only hands it the arguments.
"""

from __future__ import annotations

import sys

from ._core import agent_main


def main(argv: list[str] | None = None) -> int:
    """Run `mwc-agent` with `argv` (default: this process's arguments) and return the exit code."""
    return agent_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
