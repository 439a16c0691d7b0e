"""The repo domain, one module per job: `sync` (clone, fetch, checkout), `status` (status and
diff), `delivery` (commit and push) and `pull_request`; `repository` is what they share (the
repository an operation acts on, its origin, git's failures) and imports none of them."""

from __future__ import annotations

from . import delivery, pull_request, status, sync

# The jobs' modules, in the order the surfaces list their operations.
JOBS = (sync, status, delivery, pull_request)
