"""A workspace's terminal for people: `workspace_terminal_url` mints a ticket for one exec (to
watch it, purpose `terminal-read`, or to type into it, `terminal-write`) and answers the
terminal page's URL, which a browser opens without the bearer token. Asked for no exec, it
first opens a shell for the person (`bash -l`, else `sh`, in the workspace's root, on a
pseudo-terminal the page then fits to its window) and answers a write ticket for it.

The ticket is for opening the page: it lives `TICKET_SECONDS`. The page and its socket are
served by the REST surface (`surfaces/rest/terminal_page.py`); docs/terminal.md says what an
open socket may do once its ticket has expired.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from .. import policy
from .exec_engine import exec_args
from .machinery import tickets
from .machinery.fields import ExecId, Input, Output, Timestamp, WorkspaceId
from .machinery.table import RUN, WS, Declarations

if TYPE_CHECKING:
    from ..runtime.service import Service

__all__ = [
    "READ",
    "SHELL_ARGV",
    "SHELL_SIZE",
    "TERMINAL_ROUTE",
    "TICKET_SECONDS",
    "WRITE",
    "purpose_of",
    "workspace_terminal_url",
]

declare = Declarations()

# Where the page is served, under the gateway's public base: the ticket is the last segment.
TERMINAL_ROUTE = "/pages/terminals/"
READ: tickets.Purpose = "terminal-read"
WRITE: tickets.Purpose = "terminal-write"
# Long enough to open a link someone was handed; short enough that a link left in a chat, a
# history or a log is soon worth nothing. An open page is not cut off when it expires (its
# socket hands the page the tickets it reconnects with).
TICKET_SECONDS = 300
# The person's shell: a login bash where the image has one, else the POSIX shell.
SHELL_ARGV = ["sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh"]
# Its terminal until the page fits it to the window.
SHELL_SIZE = {"rows": 24, "cols": 80}


def purpose_of(write: bool) -> tickets.Purpose:
    return WRITE if write else READ


class TerminalInput(Input):
    workspace_id: WorkspaceId
    exec_id: ExecId | None = Field(None, description="Null: open a shell of your own.")
    write: bool = Field(False, description="Type into exec_id too, not only watch it.")


class TerminalPage(Output):
    url: str | None = Field(default=None, description="Open in a browser, no token.")
    path: str = Field(description="The page's path on this gateway.")
    exec_id: str = Field(description="The exec the page shows.")
    write: bool = Field(description="The page may type into it.")
    expires_at: Timestamp = Field(default=None, description="Open it before this.")


@declare(
    method="POST",
    path=WS + "/terminal",
    hints=RUN,
    summary="A terminal page for people: watch an exec, type into it, or a new shell.",
    in_actions=False,
)
async def workspace_terminal_url(svc: Service, inp: TerminalInput) -> TerminalPage:
    if inp.exec_id is None:
        exec_id = await _open_shell(svc, inp.workspace_id)
        write = True
    else:
        # The exec must be the workspace's: a ticket is never minted for what the caller could
        # not read (an unknown id is the agent's 404).
        await svc.request(inp.workspace_id, "exec.status", {"exec_id": inp.exec_id})
        exec_id, write = inp.exec_id, inp.write
    ticket = tickets.mint(
        svc.settings, purpose_of(write), inp.workspace_id, exec_id, TICKET_SECONDS
    )
    path = TERMINAL_ROUTE + ticket.value
    return TerminalPage(
        url=tickets.public_url(path),
        path=path,
        exec_id=exec_id,
        write=write,
        expires_at=ticket.expires,  # type: ignore[arg-type]  # made a timestamp
    )


async def _open_shell(svc: Service, workspace_id: str) -> str:
    """A new shell on a pseudo-terminal in the workspace's root: its exec id."""
    record = await svc.live_record(workspace_id)
    exec_id = policy.new_id("ex")
    # The agent gives a command on a terminal TERM=xterm-256color, what xterm.js is.
    args = exec_args(record, exec_id, argv=SHELL_ARGV, pty=dict(SHELL_SIZE))
    await svc.request(workspace_id, "exec.start", args)
    return exec_id
