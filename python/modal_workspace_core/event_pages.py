"""The page of a stream's events that a client gets. The core's page already carries the
stream's state, return code and `done` (folded from the stream's own events as they were
appended or received) and writes the client's JSON itself: REST sends `to_json()` as it is, MCP
and the Python API get the `EventPage` model parsed from the same JSON.

Sending the core's JSON instead of building and validating a model of every event is what keeps
a woken long-poll cheap: on a cold cache the model's round trip (JSON to dicts to models to JSON)
cost ~45 µs of the ~250 µs a line takes from a process to a REST client (bench/README.md).
"""

from __future__ import annotations

from ._core import Page
from .results import EventPage


class PageResult:
    """One page for a client: `to_json()` for REST, `model()` for everyone else. Both say the
    same (a test holds them to it)."""

    __slots__ = ("page",)

    def __init__(self, page: Page) -> None:
        self.page = page

    @property
    def state(self) -> str | None:
        return self.page.state

    @property
    def returncode(self) -> int | None:
        return self.page.returncode

    @property
    def done(self) -> bool:
        return self.page.done

    def model(self) -> EventPage:
        return EventPage.model_validate_json(self.page.to_client_json())

    def to_json(self) -> str:
        """`model().model_dump_json()`, without building the model."""
        return self.page.to_client_json()
