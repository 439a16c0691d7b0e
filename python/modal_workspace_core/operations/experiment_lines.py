"""The metrics a run's command reports itself, read from its output: lines of the documented form

    ::metric loss=0.31 step=120
    ::metric {"loss": 0.31, "step": 120}

(one line each, on stdout or stderr, anywhere in the output; names of letters, digits and
`_ . : / -`, starting with a letter or `_`, at most 64 characters; values finite numbers). The
output is the workspace's, so every byte of it is hostile: lines are bounded, names and values
checked, a run keeps at most `MAX_NAMES` names and `MAX_POINTS` points of each, and what does
not parse is counted (`refused`), never raised.

`MetricLog` folds the output into a summary per name (last, min, max, count) and a series of
(seconds since the run started, value) points for plots, halved (every other point dropped) each
time it fills, so a long run keeps its whole shape at a coarser grain.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from .experiment_records import MetricSummary

__all__ = ["MAX_NAMES", "MAX_POINTS", "PREFIX", "MetricLog", "MetricSummary", "parse_line"]

PREFIX = "::metric"
# Longer lines are not metric lines (nor kept while waiting for their end).
MAX_LINE_BYTES = 4096
MAX_NAMES = 32
MAX_POINTS = 240
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:/-]{0,63}")


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def parse_line(line: str) -> dict[str, float] | None:
    """The metrics of one output line (without its newline): {} for a line that is not a metric
    line, None for one that says it is and does not parse."""
    text = line.strip()
    if not text.startswith(PREFIX):
        return {}
    rest = text[len(PREFIX) :]
    if rest and not rest[0].isspace():
        return {}  # `::metrics…`: another word
    rest = rest.strip()
    if not rest:
        return None
    if rest.startswith("{"):
        try:
            data = json.loads(rest)
        except (ValueError, RecursionError):
            return None
        if not isinstance(data, dict):
            return None
        pairs = list(data.items())
    else:
        pairs = []
        for word in rest.split():
            name, sep, value = word.partition("=")
            if not sep:
                return None
            try:
                pairs.append((name, float(value)))
            except ValueError:
                return None
    out: dict[str, float] = {}
    for name, value in pairs:
        number = _number(value)
        if not isinstance(name, str) or not _NAME.fullmatch(name) or number is None:
            return None
        out[name] = number
    return out or None


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
    _partial: dict[str, bytes] = field(default_factory=dict)

    def feed(self, stream: str, data: bytes, at: float) -> None:
        buffered = self._partial.get(stream, b"") + data
        *lines, rest = buffered.split(b"\n")
        if len(rest) > MAX_LINE_BYTES:
            rest = b""  # no metric line is this long: drop it rather than hold it
        self._partial[stream] = rest
        for raw in lines:
            self._line(raw, at)

    def finish(self, at: float) -> None:
        """The output ended: a last line without its newline counts too."""
        for stream, rest in list(self._partial.items()):
            if rest:
                self._line(rest, at)
            self._partial[stream] = b""

    def _line(self, raw: bytes, at: float) -> None:
        if len(raw) > MAX_LINE_BYTES or PREFIX.encode() not in raw:
            return
        parsed = parse_line(raw.decode("utf-8", errors="replace"))
        if parsed is None:
            self.refused += 1
            return
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
