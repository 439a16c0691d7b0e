"""The page a client gets (`operations.machinery.pages`): the JSON REST sends, written by the
core around the agent's own event JSON, says exactly what the `EventPage` model says; `done` and
the state shown follow docs/architecture.md §5.2 and come from the core's page. The pages are
real ones, read from the core's `EventRing`."""

from __future__ import annotations

import json

import pytest
from modal_workspace_core._core import EventRing, Page, PolicyError, StreamKind
from modal_workspace_core.operations.machinery.pages import EventPage, PageResult


def ring_of(
    *events: tuple[str, bytes | None, dict[str, object]], kind: StreamKind | None = None
) -> EventRing:
    ring = EventRing(1 << 20, kind=kind)
    for kind, data, fields in events:
        ring.append(kind, data, **fields)
    return ring


def every_kind(kind: StreamKind | None = StreamKind.EXEC) -> EventRing:
    return ring_of(
        ("status", None, {"state": "running", "pid": 42}),
        ("stdout", b'plain "quoted" \\ text\n\ttab \x01', {}),
        ("stderr", "ünïcödé ✓\n".encode(), {}),
        ("stdout", b"\xff\xfe not utf-8", {}),
        ("stdout", b"a", {}),
        ("stdout", b"b", {}),
        ("exit", None, {"state": "finished", "returncode": 3, "signal": None}),
        kind=kind,
    )


def both(result: PageResult) -> tuple[object, object]:
    return json.loads(result.to_json()), json.loads(result.model().model_dump_json())


@pytest.mark.parametrize("coalesce", [False, True])
@pytest.mark.parametrize("kind", [StreamKind.EXEC, StreamKind.WATCH, None])
def test_the_composed_json_says_what_the_model_says(
    coalesce: bool, kind: StreamKind | None
) -> None:
    ring = every_kind(kind)
    for cursor in range(0, ring.last_seq + 1):
        for max_events in (1, 2, 100):
            page = ring.read(cursor, max_events=max_events, coalesce=coalesce)
            composed, modelled = both(PageResult(page))
            assert composed == modelled, f"cursor {cursor}"
            EventPage.model_validate_json(PageResult(page).to_json())


def test_an_expired_cursor_is_reported_the_same_both_ways() -> None:
    ring = EventRing(40_000)
    for i in range(200):
        ring.append("stdout", b"%06d" % i + b"x" * 1000)
    page = ring.read(1)
    assert page.cursor_expired and page.dropped_events > 0
    composed, modelled = both(PageResult(page))
    assert composed == modelled
    assert composed["cursor_expired"] is True  # type: ignore[index]
    assert composed["dropped_bytes"] == page.dropped_bytes > 0  # type: ignore[index]


def test_a_state_this_build_does_not_know_leaves_the_state_as_it_was() -> None:
    odd = 'quote " and \\ and \n'
    ring = ring_of(("status", None, {"state": "running"}), ("status", None, {"state": odd}))
    assert json.loads(PageResult(ring.read(0)).to_json())["state"] == "running"


def test_done_only_once_the_closed_stream_is_fully_delivered() -> None:
    running = ring_of(("stdout", b"x", {}))
    assert not _done(running.read(0))

    ended = ring_of(("stdout", b"x", {}), ("exit", None, {"state": "finished", "returncode": 0}))
    assert _done(ended.read(0)), "the exit event is in this page"
    assert not _done(ended.read(0, max_events=1)), "more is ready after this page"
    ended.close()
    assert _done(ended.read(ended.last_seq)), "an empty page after the end"

    exit_then_status = ring_of(
        ("exit", None, {"state": "finished", "returncode": 0}), ("status", None, {"state": "x"})
    )
    exit_then_status.close()
    assert _done(exit_then_status.read(0))
    assert PageResult(exit_then_status.read(0)).model().done


def _done(page: Page) -> bool:
    return PageResult(page).done


def test_the_state_shown_comes_from_the_last_word_of_the_page() -> None:
    def shown(ring: EventRing, cursor: int = 0, **read: int) -> tuple[object, object]:
        result = PageResult(ring.read(cursor, **read))
        return result.state, result.returncode

    exec_ = StreamKind.EXEC
    assert shown(ring_of(("stdout", b"x", {}), kind=exec_), cursor=1) == ("starting", None)
    running = ring_of(("status", None, {"state": "running"}), ("stdout", b"x", {}), kind=exec_)
    assert shown(running) == ("running", None)
    assert shown(running, cursor=2) == ("running", None), "an empty page needs no round trip"
    exit_page = ring_of(
        ("status", None, {"state": "running"}),
        ("stdout", b"x", {}),
        ("exit", None, {"state": "failed", "returncode": 2}),
        ("status", None, {"state": "failed"}),
        kind=exec_,
    )
    assert shown(exit_page, max_events=2) == ("running", None), "as of the page, not the end"
    assert shown(exit_page, max_events=3) == ("failed", 2)
    assert shown(exit_page) == ("failed", 2), "the closing status keeps the code"
    assert shown(exit_page, cursor=4) == ("failed", 2)


def test_an_exec_before_its_first_status_is_starting_and_a_lost_one_has_no_code() -> None:
    assert PageResult(EventRing(1 << 16, kind=StreamKind.EXEC).read(0)).state == "starting"
    lost = ring_of(("stdout", b"partial", {}), ("status", None, {"state": "lost"}))
    assert (PageResult(lost.read(0)).state, PageResult(lost.read(0)).returncode) == ("lost", None)


def test_a_watch_watches_until_its_final_status_and_never_has_a_return_code() -> None:
    watch = ring_of(("fs", None, {"kind": "create", "path": "a"}), kind=StreamKind.WATCH)
    assert (PageResult(watch.read(0)).state, PageResult(watch.read(1)).state) == (
        "watching",
        "watching",
    )
    watch.append("status", state="root_removed", returncode=3)
    watch.close()
    result = PageResult(watch.read(1))
    assert (result.state, result.returncode, result.done) == ("root_removed", None, True)


def test_stream_kinds_come_from_the_core() -> None:
    assert StreamKind.of("ex-" + "0" * 32) == StreamKind.EXEC
    assert StreamKind.of("fw-" + "a" * 32) == StreamKind.WATCH
    assert StreamKind.EXEC.has_log and not StreamKind.WATCH.has_log
    with pytest.raises(PolicyError) as err:
        StreamKind.of("ws-" + "0" * 32)
    assert err.value.rule == "stream.id"
