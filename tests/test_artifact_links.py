"""Where download links point: under the configured public URL, else the URL the request
came to (its scheme fixed where the platform fixes it), set for the one request."""

from __future__ import annotations

from modal_workspace_core.operations.artifact_transfer import link_url
from modal_workspace_core.runtime.call import LINK_BASE
from modal_workspace_core.surfaces.rest.app import LinkBase


async def test_links_are_minted_under_the_public_url_else_the_url_the_request_came_to() -> None:
    seen: list[str | None] = []

    async def app(scope: object, receive: object, send: object) -> None:
        seen.append(link_url("/artifact-links/t"))

    def scope(host: bytes) -> dict[str, object]:
        return {"type": "http", "scheme": "http", "path": "/", "headers": [(b"host", host)]}

    async def nothing() -> None: ...

    await LinkBase(app, "https://gw.example.com/prefix", None, None)(
        scope(b"x:1"), nothing, nothing
    )  # type: ignore[arg-type]
    await LinkBase(app, None, None, None)(scope(b"127.0.0.1:8765"), nothing, nothing)  # type: ignore[arg-type]
    await LinkBase(app, None, "https", None)(scope(b"app.modal.run"), nothing, nothing)  # type: ignore[arg-type]
    assert seen == [
        "https://gw.example.com/prefix/artifact-links/t",
        "http://127.0.0.1:8765/artifact-links/t",
        "https://app.modal.run/artifact-links/t",
    ]
    assert LINK_BASE.get() is None  # set for the request only
