"""What the workspace used while a run went, folded from its agent's metrics stream (the samples
`docs/protocol.md` describes: `cpu`, `memory`, `gpus`, …) into the run's `system` summary: CPU
(mean and peak, percent of one core), memory (peak used, and the OOM kills the kernel counted
meanwhile), and on GPU machines the GPUs' utilisation (mean and peak, over every GPU) and the
peak memory used on one GPU. A sample is the workspace's own data: a field that is missing or
not a number is skipped, never raised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .experiment_lines import Series

__all__ = ["SystemFold"]


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


@dataclass
class _Stat:
    total: float = 0.0
    count: int = 0
    peak: float | None = None

    def add(self, value: float | None) -> None:
        if value is None:
            return
        self.total += value
        self.count += 1
        self.peak = value if self.peak is None else max(self.peak, value)

    def mean(self) -> float | None:
        return round(self.total / self.count, 2) if self.count else None


@dataclass
class SystemFold:
    """The samples of one run, folded as they are read."""

    samples: int = 0
    cpu: _Stat = field(default_factory=_Stat)
    memory: _Stat = field(default_factory=_Stat)
    gpu_utilization: _Stat = field(default_factory=_Stat)
    gpu_memory: _Stat = field(default_factory=_Stat)
    oom_first: float | None = None
    oom_last: float | None = None
    # Over the run, for its plot: CPU (percent of a core), memory (GiB), GPU utilisation.
    series: dict[str, Series] = field(default_factory=dict)

    def add(self, sample: dict[str, Any], at: float = 0.0) -> None:
        """One sample, taken `at` seconds after the run started."""
        self.samples += 1
        cpu, memory = sample.get("cpu"), sample.get("memory")
        if isinstance(cpu, dict):
            percent = _number(cpu.get("percent"))
            self.cpu.add(percent)
            self._point("cpu_percent", at, percent)
        if isinstance(memory, dict):
            used = _number(memory.get("used_bytes"))
            self.memory.add(used)
            self._point("memory_used_gib", at, None if used is None else used / (1 << 30))
            kills = _number(memory.get("oom_kills"))
            if kills is not None:
                self.oom_first = kills if self.oom_first is None else self.oom_first
                self.oom_last = kills
        gpus = sample.get("gpus")
        if isinstance(gpus, list):
            busy = _Stat()
            for gpu in gpus[:64]:
                if isinstance(gpu, dict):
                    utilization = _number(gpu.get("utilization_percent"))
                    busy.add(utilization)
                    self.gpu_utilization.add(utilization)
                    self.gpu_memory.add(_number(gpu.get("memory_used_bytes")))
            self._point("gpu_utilization_percent", at, busy.mean())

    def _point(self, name: str, at: float, value: float | None) -> None:
        if value is not None:
            self.series.setdefault(name, Series()).add(round(at, 3), round(value, 4))

    def points(self) -> dict[str, list[tuple[float, float]]]:
        return {name: list(series.points) for name, series in self.series.items()}

    def summary(self) -> dict[str, Any] | None:
        """The run's `system`, or None before any sample."""
        if not self.samples:
            return None
        out: dict[str, Any] = {
            "samples": self.samples,
            "cpu_percent_mean": self.cpu.mean(),
            "cpu_percent_peak": self.cpu.peak,
            "memory_used_bytes_peak": _whole(self.memory.peak),
        }
        if self.oom_first is not None and self.oom_last is not None:
            out["oom_kills"] = _whole(max(0.0, self.oom_last - self.oom_first))
        if self.gpu_utilization.count or self.gpu_memory.count:
            out["gpu_utilization_percent_mean"] = self.gpu_utilization.mean()
            out["gpu_utilization_percent_peak"] = self.gpu_utilization.peak
            out["gpu_memory_used_bytes_peak"] = _whole(self.gpu_memory.peak)
        return out


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)
