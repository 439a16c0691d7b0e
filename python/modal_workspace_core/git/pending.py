"""The bookkeeping a repo operation owes once its git exec ends: its tags recorded, only after
success.

The gateway that started the exec does it in the background. So that a gateway restarted
mid-clone (a deploy, a crash, another container) does not lose it, the tags also travel with the
exec itself: `exec.start`'s `note`, which the agent keeps in its own record of the exec (out of
the workspace's reach) until a gateway settles it (`exec.settle`). The first gateway to open a
channel to the workspace afterwards asks the agent for the unsettled notes (`exec.notes`) and
settles them. Nothing of this lives in `/workspace`, where commands could forge or delete it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import policy
from ..errors import NotFoundError, WorkspaceError
from ..policy import WORKSPACE_ROOT
from .commands import repo_dir

if TYPE_CHECKING:
    from ..runtime.service import Service

log = logging.getLogger("modal_workspace_core.repo")

# The key of an exec's note that holds the repo tags to record once it succeeds.
NOTE_TAGS = "repo_tags"


def pending_note(tags: dict[str, str]) -> dict[str, Any]:
    """What `exec.start` carries as its `note` for an operation that records `tags`."""
    return {NOTE_TAGS: tags}


def track(svc: Service, ws: str, task: asyncio.Task[Any]) -> None:
    """Remembers `task` (a `settle`) until it ends, for `settled`."""
    tasks = svc.repo_settling.setdefault(ws, set())
    tasks.add(task)

    def done(_: asyncio.Task[Any]) -> None:
        tasks.discard(task)
        if not tasks:
            svc.repo_settling.pop(ws, None)

    task.add_done_callback(done)


async def settled(svc: Service, ws: str, timeout: float) -> bool:
    """Waits up to `timeout` for this process's pending repo records of `ws`; True when there
    were some (the caller then reads the record again)."""
    tasks = svc.repo_settling.get(ws)
    if not tasks:
        return False
    await asyncio.wait(set(tasks), timeout=timeout)
    return True


async def settle(svc: Service, ws: str, exec_id: str, tags: dict[str, str]) -> None:
    """Waits for `exec_id` to end, records `tags` if it succeeded, then settles its note. A
    failure to record leaves the note for a later gateway."""
    key = f"{ws}/{exec_id}"
    if not svc.claim(key):
        return  # this process already waits for it
    try:
        status = await svc.exec_ended(ws, exec_id, command=True)
        if status.get("state") == "finished" and status.get("returncode") == 0 and tags:
            if _recorded_by(status, tags, svc.settings.github_url):
                await svc.merge_tags(ws, tags)
            else:
                log.warning("not recording the tags of %s in %s: not its operation's", exec_id, ws)
        await svc.request(ws, "exec.settle", {"exec_id": exec_id})
    except NotFoundError:
        pass  # the exec is gone (its workspace pruned it): nothing will ever be recorded
    except WorkspaceError as exc:
        log.warning("could not record the repo tags of %s in %s: %s", exec_id, ws, exc)
    finally:
        svc.release(key)


async def resume_pending(svc: Service, ws: str) -> None:
    """Settles every note a previous gateway left unsettled in workspace `ws`'s agent."""
    try:
        listed, _ = await svc.request(ws, "exec.notes", {})
    except WorkspaceError as exc:
        log.warning("could not read the pending repo operations of %s: %s", ws, exc)
        return
    for status in listed.get("execs") or []:
        try:
            exec_id = policy.check_id("ex", str(status.get("exec_id")))
            tags = _tags(status.get("note"))
        except (ValueError, TypeError) as exc:  # not a note this gateway writes
            log.warning("settling a note this gateway does not know in %s: %s", ws, exc)
            await _settle_quietly(svc, ws, str(status.get("exec_id", "")))
            continue
        svc.spawn(settle(svc, ws, exec_id, tags))


def _tags(note: Any) -> dict[str, str]:
    """The repo tags of a note, each held to the rule its operation's input passed."""
    tags = note.get(NOTE_TAGS) if isinstance(note, dict) else None
    if not isinstance(tags, dict) or not all(
        isinstance(v, str) and _TAG_RULES.get(k, _refuse)(v) == v for k, v in tags.items()
    ):
        raise ValueError("its tags are not the repo tags an operation records")
    return tags


async def _settle_quietly(svc: Service, ws: str, exec_id: str) -> None:
    try:
        await svc.request(ws, "exec.settle", {"exec_id": exec_id})
    except WorkspaceError as exc:
        log.debug("could not settle %s in %s: %s", exec_id, ws, exc)


_FETCHED_AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def _recorded_by(status: dict[str, Any], tags: dict[str, str], base: str) -> bool:
    """Whether `tags` are what the exec of `status` was started to record: the agent's own
    record of the exec (which only the gateway can start with an agent step) names the
    repository and destination the tags claim. A pending record is a file of the workspace,
    which its commands can write; the exec's record in the agent is not. Kept for the notes
    too, although the agent takes them only from the gateway: a second check costs nothing."""
    steps = status.get("steps") or []
    argvs = [list(step.get("argv") or []) for step in steps if isinstance(step, dict)]
    identities = [step.get("identity") for step in steps if isinstance(step, dict)]
    if "repo-url" in tags or "repo-fetched-at" in tags:
        # A clone or fetch: the network step as the agent, then the workspace's step.
        if identities[:1] != ["agent"] or len(argvs) < 2:
            return False
        url_ok = "repo-url" not in tags or (
            policy.github_repo(tags["repo-url"]).url_on(base) in argvs[0]
        )
        path_ok = "repo-path" not in tags or repo_dir(tags["repo-path"]) in argvs[-1]
        return url_ok and path_ok
    if "repo-ref" in tags:
        # A checkout: one workspace step, `git -C DIR checkout … REF --`.
        return len(argvs) <= 1 and _is_checkout(status, tags["repo-ref"])
    return False


def _is_checkout(status: dict[str, Any], ref: str) -> bool:
    argv = [str(a) for a in status.get("argv") or []]
    return argv[:1] == ["git"] and "checkout" in argv and argv[-2:] == [ref, "--"]


def _refuse(value: str) -> str:
    raise ValueError("not a repo tag")


def _fetched_at(value: str) -> str:
    return value if _FETCHED_AT.fullmatch(value) else _refuse(value)


# The tags a repo operation records, each held to the rule its operation's input passed: a
# record forged by a command in the workspace can claim no more than a caller could ask for.
_TAG_RULES: dict[str, Callable[[str], str]] = {
    "repo-url": lambda v: policy.github_repo(v).url,
    "repo-path": lambda v: policy.workspace_path(WORKSPACE_ROOT, v),
    "repo-ref": policy.git_ref,
    "repo-fetched-at": _fetched_at,
}
