"""The page a client gets (`event_pages`): the JSON REST sends, composed around the agent's own
event JSON, says exactly what the `EventPage` model says; `done` and the state shown follow
docs/architecture.md §5.2. The pages are real ones, read from the core's `EventRing`."""

from __future__ import annotations

import json

import pytest
from modal_workspace_core._core import EventRing, Page
from modal_workspace_core.operations.pages import EventPage, PageResult, page_done, state_shown


def ring_of(*events: tuple[str, bytes | None, dict[str, object]]) -> EventRing:
    ring = EventRing(1 << 20)
    for kind, data, fields in events:
        ring.append(kind, data, **fields)
    return ring


def every_kind() -> EventRing:
    return ring_of(
        ("status", None, {"state": "running", "pid": 42}),
        ("stdout", b'plain "quoted" \\ text\n\ttab \x01', {}),
        ("stderr", "ünïcödé ✓\n".encode(), {}),
        ("stdout", b"\xff\xfe not utf-8", {}),
        ("stdout", b"a", {}),
        ("stdout", b"b", {}),
        ("exit", None, {"state": "finished", "returncode": 3, "signal": None}),
    )


def both(result: PageResult) -> tuple[object, object]:
    return json.loads(result.to_json()), json.loads(result.model().model_dump_json())


@pytest.mark.parametrize("coalesce", [False, True])
@pytest.mark.parametrize(
    ("state", "returncode"), [("running", None), ("finished", 0), ("timed_out", -9), (None, None)]
)
def test_the_composed_json_says_what_the_model_says(
    coalesce: bool, state: str | None, returncode: int | None
) -> None:
    ring = every_kind()
    for cursor in range(0, ring.last_seq + 1):
        page = ring.read(cursor, coalesce=coalesce)
        composed, modelled = both(PageResult(page, state, returncode))
        assert composed == modelled, f"cursor {cursor}"
        EventPage.model_validate_json(PageResult(page, state, returncode).to_json())


def test_an_expired_cursor_is_reported_the_same_both_ways() -> None:
    ring = EventRing(40_000)
    for i in range(200):
        ring.append("stdout", b"%06d" % i + b"x" * 1000)
    page = ring.read(1)
    assert page.cursor_expired and page.dropped_events > 0
    composed, modelled = both(PageResult(page, "running", None))
    assert composed == modelled
    assert composed["cursor_expired"] is True  # type: ignore[index]
    assert composed["dropped_bytes"] == page.dropped_bytes > 0  # type: ignore[index]


def test_a_state_that_needs_escaping_is_still_valid_json() -> None:
    page = every_kind().read(0)
    odd = 'quote " and \\ and \n'
    assert json.loads(PageResult(page, odd, None).to_json())["state"] == odd


def test_done_only_once_the_closed_stream_is_fully_delivered() -> None:
    running = ring_of(("stdout", b"x", {}))
    assert not page_done(running.read(0))

    ended = ring_of(("stdout", b"x", {}), ("exit", None, {"state": "finished", "returncode": 0}))
    assert page_done(ended.read(0)), "the exit event is in this page"
    assert not page_done(ended.read(0, max_events=1)), "more is ready after this page"
    ended.close()
    assert page_done(ended.read(ended.last_seq)), "an empty page after the end"

    exit_then_status = ring_of(
        ("exit", None, {"state": "finished", "returncode": 0}), ("status", None, {"state": "x"})
    )
    exit_then_status.close()
    assert page_done(exit_then_status.read(0))
    assert PageResult(exit_then_status.read(0), None, None).model().done


def test_the_state_shown_comes_from_the_last_word_of_the_page() -> None:
    def shown(ring: EventRing, cursor: int = 0) -> dict[str, object] | None:
        page: Page = ring.read(cursor)
        return state_shown(page, "running")

    assert shown(ring_of(("stdout", b"x", {}))) == {"state": "running"}
    assert shown(ring_of(("status", None, {"state": "running"}), ("stdout", b"x", {}))) == {
        "state": "running"
    }
    exit_page = ring_of(("stdout", b"x", {}), ("exit", None, {"state": "failed", "returncode": 2}))
    assert shown(exit_page) == {"state": "failed", "returncode": 2}
    # Only the agent can tell: an empty page, or a status that is not a live state.
    empty = ring_of(("stdout", b"x", {}))
    assert shown(empty, cursor=1) is None
    assert shown(ring_of(("status", None, {"state": "lost"}))) is None
