"""The `::metric` lines a run's command prints, read as hostile output: both forms parsed, anything
else ignored or counted, names and points bounded, lines split across reads joined."""

from __future__ import annotations

import math

from modal_workspace_core.operations.experiment_lines import (
    MAX_LINE_BYTES,
    MAX_NAMES,
    MAX_POINTS,
    MetricLog,
    parse_line,
)


def test_both_forms_parse_and_other_lines_are_not_metric_lines() -> None:
    assert parse_line("::metric loss=0.31 step=120") == {"loss": 0.31, "step": 120.0}
    assert parse_line('  ::metric {"loss": 0.31, "gpu/util": 7}') == {"loss": 0.31, "gpu/util": 7}
    assert parse_line("::metric   a=1e-3\t b=-2") == {"a": 0.001, "b": -2.0}
    for other in ("loss=0.31", "epoch 1 ::metric loss=1", "::metrics loss=1", ""):
        assert parse_line(other) == {}, other


def test_a_line_that_says_it_is_one_and_is_not_is_refused() -> None:
    for bad in (
        "::metric",
        "::metric loss",
        "::metric loss=abc",
        "::metric loss=nan",
        "::metric loss=inf",
        "::metric 1loss=2",
        "::metric " + "x" * 65 + "=1",
        '::metric {"loss": "0.3"}',
        '::metric {"ok": true}',
        "::metric [1, 2]",
        "::metric {not json",
        "::metric " + "[" * 5000,
    ):
        assert parse_line(bad) is None, bad


def test_the_log_folds_streams_joins_split_lines_and_counts_what_it_refuses() -> None:
    log = MetricLog()
    log.feed("stdout", b"::metric loss=0.9\n::metric lo", 1.0)
    log.feed("stderr", b"::metric loss=0.5\n", 2.0)
    log.feed("stdout", b"ss=0.7\nnoise\n::metric loss=x\n", 3.0)
    log.feed("stdout", b"::metric loss=0.2", 4.0)
    log.finish(4.5)
    loss = log.summary["loss"]
    assert (loss.last, loss.min, loss.max, loss.count) == (0.2, 0.2, 0.9, 4)
    assert log.refused == 1
    assert log.points()["loss"] == [(1.0, 0.9), (2.0, 0.5), (3.0, 0.7), (4.5, 0.2)]


def test_names_points_and_line_lengths_are_bounded() -> None:
    log = MetricLog()
    for i in range(MAX_NAMES + 5):
        log.feed("stdout", f"::metric m{i}=1\n".encode(), 0.0)
    assert len(log.summary) == MAX_NAMES and log.refused == 5
    log = MetricLog()
    for i in range(10_000):
        log.feed("stdout", f"::metric x={i}\n".encode(), float(i))
    points = log.points()["x"]
    assert len(points) < MAX_POINTS and points[0] == (0.0, 0.0)
    assert points[-1][0] > 9000, "the whole run, at a coarser grain"
    assert log.summary["x"].count == 10_000 and log.summary["x"].max == 9999
    log = MetricLog()
    log.feed("stdout", b"::metric y=1" + b" " * (MAX_LINE_BYTES * 3), 0.0)
    log.feed("stdout", b"\n::metric z=2\n", 1.0)
    assert set(log.summary) == {"z"}
    assert not math.isnan(log.summary["z"].last)


def test_the_rules_are_the_cores_and_hold_where_the_python_ones_did_not() -> None:
    # An integer too large for a float was an OverflowError out of the follower; now refused.
    assert parse_line('::metric {"a": 1' + "0" * 400 + "}") is None
    # A line that names more than a run keeps can never be kept whole: refused, not cut.
    names = " ".join(f"m{i}=1" for i in range(MAX_NAMES + 1))
    assert parse_line(f"::metric {names}") is None
    # Decimal notation only (Python's float() also read `1_000`), in the order written.
    assert parse_line("::metric a=1_000") is None
    assert list(parse_line('::metric {"b": 1, "a": 2}') or {}) == ["b", "a"]
    # A lone surrogate is no character of a name: refused, never raised.
    assert parse_line("::metric \ud800=1") is None


def test_the_tail_of_a_line_too_long_is_not_read_as_a_line_of_its_own() -> None:
    log = MetricLog()
    log.feed("stdout", b"x" * (MAX_LINE_BYTES * 2), 0.0)
    log.feed("stdout", b"::metric tail=1\n::metric kept=2\n", 1.0)
    log.finish(2.0)
    assert set(log.summary) == {"kept"} and log.refused == 0
