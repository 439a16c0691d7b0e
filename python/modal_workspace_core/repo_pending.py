"""The bookkeeping a repo operation owes once its git exec ends: its tags recorded (only after
success) and its askpass script removed.

The gateway that started the exec does it in the background. So that a gateway restarted
mid-clone (a deploy, a crash, another container) does not lose it, the debt is also written
into the workspace (`.mwc/pending-<exec id>.json`) before the exec starts, and the first gateway
to open a channel to the workspace afterwards pays what is left.
"""

from __future__ import annotations

import contextlib
import json
import logging
import posixpath
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import policy
from .errors import NotFoundError, WorkspaceError
from .models import WORKSPACE_ROOT
from .ops_execs import wait_final

if TYPE_CHECKING:
    from .service_core import Service

log = logging.getLogger("modal_workspace_core.repo")

# The gateway's own files in a workspace (askpass scripts, pending records).
GATEWAY_DIR = ".mwc"
_PENDING_PREFIX = "pending-"
# What a pending record may hold: well under a frame, so one read returns it whole.
_MAX_RECORD_BYTES = 64 * 1024


async def record_pending(
    svc: Service, ws: str, exec_id: str, tags: dict[str, str], askpass: str | None
) -> None:
    """Writes the debt of `exec_id` into the workspace, before the exec starts."""
    if not tags and askpass is None:
        return
    record = {"exec_id": exec_id, "tags": tags, "askpass": askpass}
    args = {"path": pending_path(exec_id), "create_parents": True}
    await svc.request(ws, "file.write", args, json.dumps(record).encode())


async def settle(
    svc: Service, ws: str, exec_id: str, tags: dict[str, str], askpass: str | None
) -> None:
    """Waits for `exec_id` to end, records `tags` if it succeeded, removes the askpass script,
    then the pending record. A failure to record leaves the record for a later gateway."""
    key = f"{ws}/{exec_id}"
    if not svc.claim(key):
        return  # this process already waits for it
    try:
        status = await wait_final(svc, ws, exec_id)
        if status.get("state") == "finished" and status.get("returncode") == 0 and tags:
            if _recorded_by(status, tags, svc.settings.github_url):
                await svc.merge_tags(ws, tags)
            else:
                log.warning("not recording the tags of %s in %s: not its operation's", exec_id, ws)
    except NotFoundError:
        pass  # the exec is gone (its workspace pruned it): nothing will ever be recorded
    except WorkspaceError as exc:
        log.warning("could not record the repo tags of %s in %s: %s", exec_id, ws, exc)
        if askpass:
            await remove_quietly(svc, ws, askpass)
        return
    finally:
        svc.release(key)
    if askpass:
        await remove_quietly(svc, ws, askpass)
    await remove_quietly(svc, ws, pending_path(exec_id))


async def resume_pending(svc: Service, ws: str) -> None:
    """Settles every pending record a previous gateway left in workspace `ws`."""
    try:
        listing, _ = await svc.request(ws, "file.list", {"path": GATEWAY_DIR, "depth": 0})
    except NotFoundError:
        return
    except WorkspaceError as exc:
        log.warning("could not read the pending repo operations of %s: %s", ws, exc)
        return
    for entry in listing.get("entries") or []:
        path = str(entry.get("path", ""))
        if not posixpath.basename(path).startswith(_PENDING_PREFIX):
            continue  # an askpass script: its record says whether it is still needed
        try:
            exec_id, tags, askpass = await _read_record(svc, ws, path)
        except WorkspaceError as exc:  # perhaps passing: a later gateway tries again
            log.warning("could not read the pending record %s of %s: %s", path, ws, exc)
            continue
        except (ValueError, KeyError, TypeError) as exc:  # not ours as written: drop it
            log.warning("removing the malformed pending record %s of %s: %s", path, ws, exc)
            await remove_quietly(svc, ws, path)
            continue
        svc.spawn(settle(svc, ws, exec_id, tags, askpass))


async def _read_record(svc: Service, ws: str, path: str) -> tuple[str, dict[str, str], str | None]:
    """A record as written by `record_pending`, checked as strictly as a client's input: the
    workspace's files are writable by its commands."""
    meta, data = await svc.request(ws, "file.read", {"path": path, "max_len": _MAX_RECORD_BYTES})
    if not meta.get("eof", True):
        raise ValueError("too large")
    record: Any = json.loads(data)
    exec_id = policy.check_id("ex", str(record["exec_id"]))
    if path != pending_path(exec_id):
        raise ValueError("named after another exec")
    tags = record.get("tags") or {}
    if not isinstance(tags, dict) or not all(
        isinstance(v, str) and _TAG_RULES.get(k, _refuse)(v) == v for k, v in tags.items()
    ):
        raise ValueError("its tags are not the repo tags an operation records")
    askpass = record.get("askpass")
    if askpass is not None and askpass != f"{GATEWAY_DIR}/askpass-{exec_id}":
        raise ValueError("askpass must be this exec's script")
    return exec_id, tags, askpass


async def remove_quietly(svc: Service, ws: str, path: str) -> None:
    with contextlib.suppress(WorkspaceError):
        await svc.request(ws, "file.remove", {"path": path, "recursive": False})


_FETCHED_AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def _recorded_by(status: dict[str, Any], tags: dict[str, str], base: str) -> bool:
    """Whether `tags` are what the exec of `status` was started to record: the agent's own
    record of the exec (which only the gateway can start with an agent step) names the
    repository and destination the tags claim. A pending record is a file of the workspace,
    which its commands can write; the exec's record in the agent is not."""
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
        path_ok = "repo-path" not in tags or f"./{_relative(tags['repo-path'])}" in argvs[-1]
        return url_ok and path_ok
    if "repo-ref" in tags:
        # A checkout: one workspace step, `git -C DIR checkout … REF --`.
        return len(argvs) <= 1 and _is_checkout(status, tags["repo-ref"])
    return False


def _is_checkout(status: dict[str, Any], ref: str) -> bool:
    argv = [str(a) for a in status.get("argv") or []]
    return argv[:1] == ["git"] and "checkout" in argv and argv[-2:] == [ref, "--"]


def _relative(path: str) -> str:
    return posixpath.relpath(path, WORKSPACE_ROOT) if path.startswith("/") else path


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


def pending_path(exec_id: str) -> str:
    return posixpath.join(GATEWAY_DIR, f"{_PENDING_PREFIX}{exec_id}.json")
