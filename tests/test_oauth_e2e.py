"""OAuth against the real server (`modal-workspace serve` on the local driver, a process of its
own): the official SDK client registers, is approved at the consent page and runs the cursor
loop of a live command; two server processes share one store (on the local driver the SQLite file
of their data root; on Modal the state Volume of the test control plane, each process with a data
root of its own), so a token one issued works at the other and a revocation at either holds at
both."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import httpx2
import pytest
from e2e_support import local_backend, modal_backend, serve
from service_support import TOKEN
from support.oauth_host import ApprovingBrowser, MemoryStorage, OAuthHost, pkce, sdk_client


async def test_the_sdk_client_runs_the_cursor_loop_over_oauth(tmp_path: Path) -> None:
    with (
        local_backend(tmp_path, "ghp_never", isolation="none") as backend,
        serve(tmp_path, "ghp_never", backend) as served,
    ):
        base = served.base_url
        async with httpx2.AsyncClient(timeout=30) as http:
            browser = ApprovingBrowser(http, base, TOKEN)
            async with sdk_client(browser, MemoryStorage(), "SDK host") as client:

                async def tool(name: str, **args: Any) -> dict[str, Any]:
                    result = await client.call_tool(name, args)
                    assert not result.is_error, result.content
                    assert result.structured_content is not None
                    return result.structured_content

                ws = (await tool("workspace_create"))["workspace_id"]
                try:
                    started = await tool(
                        "workspace_realtime_exec_start",
                        workspace_id=ws,
                        command="echo first; sleep 1; echo second",
                    )
                    cursor, out = 0, ""
                    while True:
                        page = await tool(
                            "workspace_realtime_exec_events",
                            workspace_id=ws,
                            exec_id=started["exec_id"],
                            cursor=cursor,
                            wait_seconds=10,
                        )
                        out += "".join(
                            e.get("data", "") for e in page["events"] if e["type"] == "stdout"
                        )
                        cursor = page["next_cursor"]
                        if page["done"]:
                            break
                    assert out.split() == ["first", "second"]
                finally:
                    await tool("workspace_terminate", workspace_id=ws)


@pytest.mark.parametrize("driver", ["local", "modal"])
async def test_two_server_processes_share_tokens_and_revocations(
    tmp_path: Path, driver: str
) -> None:
    with contextlib.ExitStack() as stack:
        if driver == "local":
            backend = stack.enter_context(local_backend(tmp_path, "ghp_never", isolation="none"))
            roots = (tmp_path, tmp_path)
        else:
            backend = stack.enter_context(modal_backend("ghp_never"))
            # Nothing shared on disk: only Modal's Volume joins them.
            roots = (tmp_path / "one", tmp_path / "two")
        for root in roots:
            root.mkdir(exist_ok=True)
        first = stack.enter_context(serve(roots[0], "ghp_never", backend)).base_url
        second = stack.enter_context(serve(roots[1], "ghp_never", backend)).base_url
        async with httpx2.AsyncClient(timeout=30) as http:
            host = OAuthHost(http, first)
            await host.register()
            verifier, challenge = pkce()
            issued = await host.exchange(await host.code(TOKEN, challenge), verifier)
            assert issued.status_code == 200, issued.text
            access = issued.json()["access_token"]
            auth = {"Authorization": f"Bearer {access}"}
            # Behind one name (as a load balancer spreads them), the second takes what the first
            # issued.
            named = {**auth, "Host": first.removeprefix("http://")}
            assert (await http.get(f"{second}/api/workspaces", headers=named)).status_code == 200
            revoked = await http.post(
                f"{second}/revoke",
                data={
                    "token": access,
                    "client_id": host.client["client_id"],
                    "client_secret": host.client["client_secret"],
                },
            )
            assert revoked.status_code == 200, revoked.text
            assert (await http.get(f"{first}/api/workspaces", headers=auth)).status_code == 401
        if backend.plane is not None:
            stored = backend.plane.volume_files("modal-workspace-state")
            # The grant's records, its tokens gone with the revocation.
            assert any(key.startswith("oauth/grants/") for key in stored), sorted(stored)
            assert not any(key.startswith("oauth/tokens/") for key in stored), sorted(stored)
            # Kept as digests: no token's value is anywhere in the Volume.
            assert not any(access.encode() in value for value in stored.values())
            assert not any((root / "data" / "shared.sqlite3").exists() for root in roots)
