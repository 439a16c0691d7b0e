"""A process that serves the gateway sets its garbage collector for many parked requests: what
it built before serving is out of the collector's sight, and young collections are rarer."""

from __future__ import annotations

import json
import subprocess
import sys

from modal_workspace_core.surfaces.serving_gc import YOUNG_ALLOCATIONS

PROBE = """
import gc, json
from modal_workspace_core.surfaces.rest import app
from modal_workspace_core.surfaces.serving_gc import settle_for_serving
before = (gc.get_freeze_count(), gc.get_threshold()[0])
settle_for_serving()
print(json.dumps([before, [gc.get_freeze_count(), gc.get_threshold()[0]]]))
"""


def test_settling_freezes_what_was_built_and_collects_the_young_less_often() -> None:
    # In a process of its own: the collector is the whole process's, the test runner's too.
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    (frozen_before, young_before), (frozen_after, young_after) = json.loads(out)
    assert frozen_before == 0
    # The app's modules, models and routes: tens of thousands of objects.
    assert frozen_after > 10_000
    assert young_before < YOUNG_ALLOCATIONS == young_after
