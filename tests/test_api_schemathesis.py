"""schemathesis against the app in-process, driven by the GPT Actions schema: whatever it sends,
no 5xx and no response outside the schema. The driver is the real local driver on a temporary
data root; examples are bounded so that the run stays short."""

from __future__ import annotations

import atexit
import shutil
import tempfile

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from modal_workspace_core.config import load_settings
from modal_workspace_core.operations import new_service
from modal_workspace_core.surfaces.rest.app import create_app
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from service_support import TOKEN

local = pytest.importorskip("modal_workspace_core.drivers.local.driver")

# Built at import: schemathesis parametrizes from a loaded schema (its fixture loader does not
# work with this pytest). The app's lifespan may run once per call, so it must not close the
# service at the end of each.
_ROOT = tempfile.mkdtemp(prefix="mwc-schemathesis-")
atexit.register(shutil.rmtree, _ROOT, True)
_APP = create_app(
    new_service(local.LocalDriver(data_root=_ROOT), load_settings({}, data_root=_ROOT)),
    [TOKEN],
    close_service=False,
)
schema = schemathesis.openapi.from_asgi("/action-openapi.json", _APP)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


# workspace_create would start a real workspace per example; the end-to-end tests cover it.
@schema.exclude(operation_id="workspace_create").parametrize()
@settings(max_examples=5, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_no_server_errors_and_no_schema_violations(case: schemathesis.Case) -> None:
    case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"}, checks=CHECKS)
