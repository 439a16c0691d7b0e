"""An experiment run's page for people: `experiment_page_url` mints a ticket for the run (purpose
`experiment-page`) and answers the page's URL, which a browser opens without the bearer token
until the ticket expires. The page itself is served by the REST surface (`PAGE_ROUTE`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from .experiments import XP, ExperimentRef, experiment_get
from .machinery import tickets
from .machinery.fields import Input, Output, RunId, Timestamp, WorkspaceId
from .machinery.table import READ, Declarations

if TYPE_CHECKING:
    from ..runtime.service import Service

__all__ = ["PAGE_ROUTE", "PURPOSE", "experiment_page_url"]

declare = Declarations()

# Where the pages are served, under the gateway's public base: the ticket is the last segment.
PAGE_ROUTE = "/pages/experiments/"
PURPOSE: tickets.Purpose = "experiment-page"


class ExperimentPageInput(Input):
    workspace_id: WorkspaceId
    run_id: RunId
    seconds: int = Field(tickets.DEFAULT_SECONDS, ge=1, le=tickets.MAX_SECONDS)


class ExperimentPage(Output):
    url: str | None = Field(default=None, description="Open in a browser, no token.")
    path: str = Field(description="The page's path on this gateway.")
    expires_at: Timestamp = None


@declare(
    method="GET",
    path=XP + "/{run_id}/page",
    hints=READ,
    summary="A run's live page for people: a link with no token in it.",
    in_actions=False,
)
async def experiment_page_url(svc: Service, inp: ExperimentPageInput) -> ExperimentPage:
    # The run must be the workspace's (or a fork's parent's, listed as its own): a ticket is
    # never minted for what the caller could not read.
    await experiment_get(svc, ExperimentRef(workspace_id=inp.workspace_id, run_id=inp.run_id))
    ticket = tickets.mint(svc.settings, PURPOSE, inp.workspace_id, inp.run_id, inp.seconds)
    path = PAGE_ROUTE + ticket.value
    return ExperimentPage(
        url=tickets.public_url(path),
        path=path,
        expires_at=ticket.expires,  # type: ignore[arg-type]  # made a timestamp
    )
