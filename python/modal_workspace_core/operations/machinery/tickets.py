"""Tickets: what a person's browser opens a page with (an experiment's, a workspace's terminal
or preview) in place of the bearer token, which never goes in a URL. An authenticated call mints
one; it grants one purpose on one object of one workspace until it expires, and nothing else.

The core holds the rule (`_core.mint_ticket`, `_core.verify_ticket`: the shape, checked before
anything is decoded, the signature in constant time, the purpose, the expiry); the key is the
deployment's (`Settings.ticket_secret`), so any gateway of it takes a ticket another minted. A
gateway configured with neither tokens nor a channel secret (a loopback server whose token was
minted at its start) is a deployment of one process: it signs with a key of that process's own,
which its tickets do not outlive.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Literal

from ... import _core
from ...config import Settings
from ...errors import core_refusal, denied
from ...runtime.call import LINK_BASE

__all__ = [
    "DEFAULT_SECONDS",
    "MAX_SECONDS",
    "Grant",
    "Purpose",
    "Ticket",
    "check",
    "mint",
    "public_url",
]

# What a ticket may be for: each is a page (or a stream) of its own, and a ticket for one is
# refused by every other. A terminal's are two: watching an exec, and typing into it.
Purpose = Literal["experiment-page", "terminal-read", "terminal-write", "preview"]
DEFAULT_SECONDS = 600
MAX_SECONDS: int = _core.MAX_TICKET_SECONDS
# One answer for every refusal: whether a ticket was altered, expired or is another page's is
# not the presenter's to learn.
REFUSAL = (
    "this link is not valid (it expired, was altered or is for something else): ask for a new one"
)


# A process's own key, for a gateway whose settings derive none (see above).
_PROCESS_KEY = secrets.token_bytes(32)


@dataclass(frozen=True)
class Ticket:
    value: str
    expires: int  # unix seconds


@dataclass(frozen=True)
class Grant:
    """What a checked ticket grants."""

    workspace_id: str
    object_id: str
    expires: int


def mint(
    settings: Settings,
    purpose: Purpose,
    workspace_id: str,
    object_id: str,
    seconds: int = DEFAULT_SECONDS,
) -> Ticket:
    """A ticket for `purpose` on `object_id` in `workspace_id`, live `seconds` from now."""
    with core_refusal("seconds"):
        value, expires = _core.mint_ticket(
            _key(settings), purpose, workspace_id, object_id, int(time.time()), seconds
        )
    return Ticket(value=value, expires=expires)


def check(
    settings: Settings,
    ticket: str,
    purpose: Purpose,
    *,
    workspace_id: str | None = None,
    object_id: str | None = None,
) -> Grant:
    """What `ticket` grants, when this deployment minted it for `purpose` (and, where given,
    for `workspace_id` and `object_id`) and it is live; else a 403 that says no more."""
    with core_refusal(None, error=lambda _message, field: denied(REFUSAL, field)):
        workspace, obj, expires = _core.verify_ticket(
            _key(settings), ticket, purpose, int(time.time()), workspace_id, object_id
        )
    return Grant(workspace_id=workspace, object_id=obj, expires=expires)


def _key(settings: Settings) -> bytes:
    return settings.ticket_secret or _PROCESS_KEY


def public_url(path: str) -> str | None:
    """`path` under the base the request being served reached the gateway by (None outside a
    request: an in-process caller has the path alone)."""
    base = LINK_BASE.get()
    return base.rstrip("/") + path if base else None
