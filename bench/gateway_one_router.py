"""`modal-workspace serve` with one REST router: the product's app without its operation fast
path (`OperationDispatch`), so that FastAPI's router serves the operation routes through
`OperationRoute`, as it already does for any request the fast path passes on.

The benchmark runs it beside the product to ask whether the fast path is worth keeping; the
product has no switch for it, so this launcher takes the middleware out of the app that
`create_app` built, before the app's first request assembles its middleware stack.
`python bench/gateway_one_router.py serve ARGS…` takes the arguments of `modal-workspace`.
"""

from __future__ import annotations

import sys
from typing import Any

from modal_workspace_core import api, cli
from modal_workspace_core.operation_routes import OperationDispatch

product_app = api.create_app


def one_router_app(*args: Any, **kwargs: Any) -> Any:
    app = product_app(*args, **kwargs)
    app.user_middleware = [m for m in app.user_middleware if m.cls is not OperationDispatch]
    return app


if __name__ == "__main__":
    api.create_app = one_router_app  # `cli` looks it up in `api` when it serves
    sys.exit(cli.main())
