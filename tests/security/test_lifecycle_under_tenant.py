"""The lifecycle sweep copies a workspace with no client call at all (its safety snapshot
before its lifetime ends, its exit snapshot), and the next operation resumes it from such a
snapshot: both under the hostile tenant, through a real `modal-workspace serve` on the local
driver (isolated). The host's canary must reach no snapshot and no resumed workspace.

On Modal no host process copies a workspace's files (Modal snapshots the sandbox itself), and
the test control plane's sandboxes share the host's pid namespace (they are no boundary), so the
tenant does not apply there."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import Served, api_client, local_backend, ok, serve
from modal_workspace_core.drivers.local.bubblewrap import probe

from .hostile_tenant import TENANT, Canary, assert_no_leak, launch_command

STABLE = "stable/keep.txt"
# Unisolated, the tenant would reshape and write into the host's own processes: never run it so.
pytestmark = pytest.mark.skipif(
    not probe().enabled, reason=f"needs bubblewrap for the tenant: {probe()}"
)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with local_backend(tmp_path, "ghp_unused") as backend:
        # A sweep every second, and a safety snapshot 4 s before a lifetime ends.
        env = {
            **backend.env,
            "MODAL_WORKSPACE_JANITOR_SECONDS": "1",
            "MODAL_WORKSPACE_SAFETY_MARGIN_SECONDS": "4",
            "MODAL_WORKSPACE_ISOLATION": "bwrap",
        }
        with serve(tmp_path, "", dataclasses.replace(backend, env=env)) as served:
            yield served


def until(what: str, check: Callable[[], Any], within: float = 120) -> Any:
    deadline = time.monotonic() + within
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} did not happen within {within} s"
        time.sleep(0.5)
    return found


def test_the_sweeps_snapshots_and_the_resume_from_them_never_hold_a_host_file(
    served: Served, tmp_path: Path
) -> None:
    canary = Canary.make(tmp_path)
    with api_client(served) as api:
        created = ok(api.post("/workspaces", json={"resources": {"timeout_seconds": 25}}))
        ws = created["workspace_id"]
        for path, content in ((STABLE, "kept\n"), (".tenant.py", TENANT)):
            ok(api.put(f"/workspaces/{ws}/files/content", json={"path": path, "content": content}))
        started = ok(api.post(f"/workspaces/{ws}/exec", json={"command": launch_command(canary)}))
        assert "tenant-ready" in started["stdout"], started

        got = until(
            f"{ws} suspended by the sweep",
            lambda: (w := ok(api.get(f"/workspaces/{ws}")))["state"] == "suspended" and w,
        )
        kinds = [s["kind"] for s in ok(api.get(f"/workspaces/{ws}/snapshots"))["snapshots"]]
        # The safety snapshot was taken while the tenant reshaped the tree: a copy that fails
        # on what vanished or changed kind under it would have left none.
        assert "safety" in kinds, (kinds, got["lifecycle"])
        assert_no_leak(served.files_root, canary)

        # The next operation resumes it from the sweep's snapshot.
        read = ok(
            api.post(
                f"/workspaces/{ws}/exec",
                json={"command": f"cat {STABLE}; grep -rls HOST-CANARY /workspace ~ /tmp | head"},
            )
        )
        assert read["stdout"] == "kept\n", read
        assert read["resumed_from"] is not None
        assert_no_leak(served.files_root, canary)
