"""The metrics a run's command reports itself, read from its output: lines of the documented form

    ::metric loss=0.31 step=120
    ::metric {"loss": 0.31, "step": 120}

(one line each, on stdout or stderr, anywhere in the output; names of letters, digits and
`_ . : / -`, starting with a letter or `_`, at most 64 characters; values finite numbers). The
rules are the core's (`_core.metric_line`, `_core.MetricLines`), the same the agent reads the
lines by when it tees them into the workspace's metrics stream. The output is the workspace's, so
every byte of it is hostile: lines are bounded, names and values checked, a run keeps at most
`MAX_NAMES` names and `MAX_POINTS` points of each, and what does not parse is counted
(`refused`), never raised.

`MetricLog` folds the output into a summary per name (last, min, max, count) and a series of
(seconds since the run started, value) points for plots, halved (every other point dropped) each
time it fills, so a long run keeps its whole shape at a coarser grain.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._core import (
    MAX_METRIC_LINE_BYTES,
    MAX_METRIC_NAMES,
    METRIC_PREFIX,
    MetricLines,
    metric_line,
)
from .experiment_records import MetricSummary

__all__ = ["MAX_NAMES", "MAX_POINTS", "PREFIX", "MetricLog", "MetricSummary", "parse_line"]

PREFIX = METRIC_PREFIX
# Longer lines are not metric lines (nor kept while waiting for their end).
MAX_LINE_BYTES = MAX_METRIC_LINE_BYTES
MAX_NAMES = MAX_METRIC_NAMES
MAX_POINTS = 240
# The metrics of one output line (without its newline): {} for a line that is not a metric
# line, None for one that says it is and does not parse.
parse_line = metric_line


@dataclass
class Series:
    """Points over a run, at most `MAX_POINTS`: when full, every other one goes, and from then
    on only one report in `every` is kept."""

    every: int = 1  # keep one report in `every` (doubles each time the series fills)
    seen: int = 0
    points: list[tuple[float, float]] = field(default_factory=list)

    def add(self, at: float, value: float) -> None:
        self.seen += 1
        if (self.seen - 1) % self.every:
            return
        self.points.append((at, value))
        if len(self.points) >= MAX_POINTS:
            self.points = self.points[::2]
            self.every *= 2


@dataclass
class MetricLog:
    """What a run's output reported, folded as it is read (`feed`, one stream's bytes at a
    time, with the seconds since the run started)."""

    summary: dict[str, MetricSummary] = field(default_factory=dict)
    series: dict[str, Series] = field(default_factory=dict)
    refused: int = 0  # metric lines that did not parse, or named one name too many
    _readers: dict[str, MetricLines] = field(default_factory=dict)

    def feed(self, stream: str, data: bytes, at: float) -> None:
        reader = self._readers.get(stream)
        if reader is None:
            reader = self._readers[stream] = MetricLines()
        self._lines(reader.feed(data), at)

    def finish(self, at: float) -> None:
        """The output ended: a last line without its newline counts too."""
        for reader in self._readers.values():
            self._lines(reader.finish(), at)

    def _lines(self, lines: list[dict[str, float] | None], at: float) -> None:
        for parsed in lines:
            if parsed is None:
                self.refused += 1
                continue
            for name, value in parsed.items():
                self._add(name, value, at)

    def _add(self, name: str, value: float, at: float) -> None:
        held = self.summary.get(name)
        if held is None:
            if len(self.summary) >= MAX_NAMES:
                self.refused += 1
                return
            self.summary[name] = MetricSummary(last=value, min=value, max=value, count=1)
            self.series[name] = Series()
        else:
            held.last = value
            held.min = min(held.min, value)
            held.max = max(held.max, value)
            held.count += 1
        self.series[name].add(round(at, 3), value)

    def points(self) -> dict[str, list[tuple[float, float]]]:
        return {name: list(series.points) for name, series in self.series.items()}
