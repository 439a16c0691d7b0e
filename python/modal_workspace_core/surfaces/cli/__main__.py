"""`python -m modal_workspace_core.surfaces.cli`: the `modal-workspace` command."""

import sys

from . import main

sys.exit(main())
