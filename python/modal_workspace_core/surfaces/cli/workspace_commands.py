"""The commands on workspaces themselves: create (and clone into it), clone, list, get, snapshot,
fork, resume and terminate. Each is one operation of the table, or a few, with a spinner or a
bar on stderr while it takes time, and its answer on stdout (the operation's JSON with `--json`).
"""

from __future__ import annotations

import asyncio
import json
import time
import webbrowser
from collections.abc import Mapping
from typing import Any

from rich.table import Table

from ...errors import ConflictError, UpstreamError, WorkspaceError
from .contract import Client
from .git_progress import GitProgress
from .output import Output
from .streams import EXEC_EVENTS, STREAM_EVENTS, event_bytes, pages

__all__ = [
    "clone",
    "create",
    "fork",
    "get",
    "list_workspaces",
    "resume",
    "snapshot",
    "terminate",
]

# How long a snapshot that reports on no stream is waited for, and how often it is looked for.
_LISTED_WITHIN_SECONDS = 1800.0
_LOOK_EVERY_SECONDS = 2.0


async def create(
    client: Client, out: Output, fields: Mapping[str, Any], repo: Mapping[str, Any] | None
) -> int:
    """A new workspace (its id on stdout), and with `repo` a clone into it, followed to its end.
    A failed clone leaves the workspace there and says so (status 1)."""
    with out.status("creating a workspace"):
        info = await client.call("workspace_create", fields)
    ws = str(info["workspace_id"])
    if repo is None:
        out.result(info, ws)
        return 0
    cloned = await _clone(client, out, ws, repo)
    out.result({**info, "clone": cloned}, ws)
    if cloned.get("returncode") != 0:
        out.note(f"modal-workspace: {ws} was created; the clone into it failed")
        return 1
    return 0


async def clone(client: Client, out: Output, workspace_id: str, repo: Mapping[str, Any]) -> int:
    """A clone into an existing workspace, followed to its end (its destination on stdout)."""
    cloned = await _clone(client, out, workspace_id, repo)
    out.result(cloned, str(cloned.get("destination", "")))
    return 0 if cloned.get("returncode") == 0 else 1


async def _clone(
    client: Client, out: Output, workspace_id: str, repo: Mapping[str, Any]
) -> dict[str, Any]:
    """`repo_clone`'s answer, with the state and return code the clone ended with; git's
    progress as a bar meanwhile, and its other lines on stderr when it failed."""
    started = await client.call("repo_clone", {"workspace_id": workspace_id, **repo})
    ids = {"workspace_id": workspace_id, "exec_id": str(started["exec_id"])}
    git = GitProgress()
    page: dict[str, Any] = {}
    with out.steps_bar(f"cloning {started.get('repository', '')}") as bar:
        async for page in pages(client, EXEC_EVENTS, ids):
            for event in page.get("events") or ():
                if event.get("type") in ("stdout", "stderr"):
                    text = event_bytes(event).decode(errors="replace")
                    if git.feed(text):
                        bar.update(git.phase, git.done, git.total)
    ended = {**started, "state": page.get("state"), "returncode": page.get("returncode")}
    if page.get("returncode") != 0:
        status = await client.call("workspace_realtime_exec_status", ids)
        ended["error"] = status.get("error")
        for line in git.lines:
            out.note(f"  | {line}")
        reason = status.get("error") or f"git ended {page.get('state')}, {page.get('returncode')}"
        out.note(f"modal-workspace: the clone of {started.get('repository')} failed: {reason}")
    return ended


async def list_workspaces(client: Client, out: Output) -> int:
    listed = await client.call("workspace_list", {})
    workspaces = listed.get("workspaces") or []

    def table() -> None:
        if not workspaces:
            out.note("no workspaces")
            return
        grid = Table(box=None, pad_edge=False)
        for column in ("WORKSPACE", "STATE", "CREATED", "TAGS"):
            grid.add_column(column, no_wrap=column != "TAGS")
        for ws in workspaces:
            tags = ", ".join(f"{k}={v}" for k, v in sorted((ws.get("tags") or {}).items()))
            grid.add_row(ws["workspace_id"], ws.get("state", ""), ws.get("created_at", ""), tags)
        out.out.print(grid)
        if listed.get("truncated"):
            out.note("(more workspaces than fitted one answer)")

    out.result(listed, table)
    return 0


async def get(client: Client, out: Output, workspace_id: str) -> int:
    info = await client.call("workspace_get", {"workspace_id": workspace_id})

    def fields() -> None:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column()
        for name, value in info.items():
            if value in (None, {}, []):
                continue
            shown = value if isinstance(value, str) else _compact(value)
            grid.add_row(name, shown)
        out.out.print(grid)

    out.result(info, fields)
    return 0


async def snapshot(
    client: Client, out: Output, workspace_id: str, fields: Mapping[str, Any]
) -> int:
    """A snapshot (its id on stdout), its progress as a bar while it is taken."""
    # Asked not to wait: the call answers at once with the stream of the snapshot's progress,
    # which this follows (and a gateway's deadline on a call never cuts a long one short).
    taking = await client.call(
        "workspace_snapshot", {"workspace_id": workspace_id, **fields, "wait_seconds": 0}
    )
    taken = taking
    if taking.get("state") == "taking":
        stream = taking.get("progress_stream_id")
        if stream:
            taken = await _followed(client, out, workspace_id, str(stream), taking)
        else:
            taken = await _listed(client, out, workspace_id, str(taking["snapshot_id"]))
    out.result(taken, str(taken["snapshot_id"]))
    return 0


async def _followed(
    client: Client, out: Output, workspace_id: str, stream: str, taking: Mapping[str, Any]
) -> dict[str, Any]:
    """The snapshot a task stream ends with: its `exit` event's result, or its error raised."""
    ids = {"workspace_id": workspace_id, "stream_id": stream}
    result: dict[str, Any] | None = None
    with out.steps_bar(f"snapshot {taking['snapshot_id']}") as bar:
        async for page in pages(client, STREAM_EVENTS, ids):
            for event in page.get("events") or ():
                if event.get("type") == "progress":
                    done, total = event.get("done"), event.get("total")
                    bar.update(str(event.get("message") or "") or None, done, total)
                elif event.get("type") == "exit":
                    error = event.get("error")
                    if isinstance(error, Mapping) and isinstance(error.get("error"), Mapping):
                        body = error["error"]
                        raise WorkspaceError(
                            str(body.get("code")), str(body.get("message")), body.get("field")
                        )
                    if isinstance(event.get("result"), dict):
                        result = event["result"]
    if result is None:
        raise UpstreamError(f"snapshot {taking['snapshot_id']}: its progress ended without it")
    return result


async def _listed(
    client: Client, out: Output, workspace_id: str, snapshot_id: str
) -> dict[str, Any]:
    """A snapshot with no progress stream: looked for until it is listed."""
    deadline = time.monotonic() + _LISTED_WITHIN_SECONDS
    with out.status(f"taking snapshot {snapshot_id}"):
        while time.monotonic() < deadline:
            listed = await client.call("workspace_snapshot_list", {"workspace_id": workspace_id})
            for found in listed.get("snapshots") or ():
                if found.get("snapshot_id") == snapshot_id:
                    return dict(found)
            await asyncio.sleep(_LOOK_EVERY_SECONDS)
    raise UpstreamError(f"snapshot {snapshot_id} was not listed within {_LISTED_WITHIN_SECONDS} s")


async def fork(client: Client, out: Output, workspace_id: str, fields: Mapping[str, Any]) -> int:
    """A new workspace from a snapshot of this one (its id on stdout)."""
    with out.status(f"forking {workspace_id}"):
        info = await client.call("workspace_fork", {"workspace_id": workspace_id, **fields})
    out.result(info, str(info["workspace_id"]))
    return 0


async def resume(client: Client, out: Output, workspace_id: str, snapshot_id: str | None) -> int:
    with out.status(f"resuming {workspace_id}"):
        info = await client.call(
            "workspace_resume", {"workspace_id": workspace_id, "snapshot_id": snapshot_id}
        )
    resumed = info.get("resumed_from") or snapshot_id
    line = f"{workspace_id} {info.get('state')}" + (f" (from {resumed})" if resumed else "")
    out.result(info, line)
    return 0


async def terminate(
    client: Client, out: Output, workspace_id: str, fields: Mapping[str, Any]
) -> int:
    with out.status(f"terminating {workspace_id}"):
        ended = await client.call("workspace_terminate", {"workspace_id": workspace_id, **fields})
    kept = ended.get("snapshot_id")
    line = f"terminated {workspace_id}" + (f" (its final snapshot: {kept})" if kept else "")
    out.result(ended, line)
    return 0


def _compact(value: Any) -> str:
    """A nested value on one line, as JSON."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


async def open_terminal(
    client: Client,
    out: Output,
    workspace_id: str,
    exec_id: str | None,
    write: bool,
    browse: bool,
) -> int:
    """The terminal page's link (a short-lived ticket, never the token), printed and opened in
    a browser where this machine has one: an exec's (watched, or typed into with `write`), or a
    new shell's."""
    fields = {"workspace_id": workspace_id, "exec_id": exec_id, "write": write or exec_id is None}
    answer = await client.call("workspace_terminal_url", fields)
    url = answer.get("url")
    if not url:
        # In process there is no gateway, and so no page: the link needs one to open it.
        raise ConflictError(
            f"no gateway serves the page of {answer.get('path')}: run `modal-workspace serve` "
            "and give its address with --url (or MODAL_WORKSPACE_URL)"
        )
    out.result(answer, str(url))
    if browse and not out.json_mode:
        webbrowser.open(str(url))
    return 0
