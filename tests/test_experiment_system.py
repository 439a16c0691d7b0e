"""A run's `system` summary folded from metrics samples (the agent's `metrics` events), which are
the workspace's data: missing or malformed fields are skipped."""

from __future__ import annotations

from modal_workspace_core.operations.experiment_system import SystemFold


def sample(cpu: object, used: object, kills: object, gpus: object = None) -> dict[str, object]:
    out: dict[str, object] = {"cpu": {"percent": cpu}, "memory": {"used_bytes": used}}
    out["memory"]["oom_kills"] = kills  # type: ignore[index]
    if gpus is not None:
        out["gpus"] = gpus
    return out


def test_cpu_memory_and_oom_kills_during_the_run() -> None:
    fold = SystemFold()
    assert fold.summary() is None
    for s in (sample(50.0, 100, 2), sample(150.0, 300, 2), sample(100.0, 200, 3)):
        fold.add(s)
    assert fold.summary() == {
        "samples": 3,
        "cpu_percent_mean": 100.0,
        "cpu_percent_peak": 150.0,
        "memory_used_bytes_peak": 300,
        "oom_kills": 1,
    }


def test_gpus_are_summed_up_over_every_gpu_and_garbage_is_skipped() -> None:
    fold = SystemFold()
    gpu = {"utilization_percent": 90, "memory_used_bytes": 8 << 30}
    idle = {"utilization_percent": 10, "memory_used_bytes": 1 << 30}
    fold.add(sample(1.0, 1, 0, [gpu, idle]))
    fold.add(sample("x", None, True, [{"utilization_percent": "[N/A]"}, "junk", None]))
    fold.add({"cpu": [], "memory": "full", "gpus": {"0": 1}})
    fold.add(sample(float("nan"), -5, float("inf")))
    summary = fold.summary()
    assert summary is not None
    assert summary["samples"] == 4 and summary["cpu_percent_peak"] == 1.0
    assert summary["gpu_utilization_percent_mean"] == 50.0
    assert summary["gpu_utilization_percent_peak"] == 90
    assert summary["gpu_memory_used_bytes_peak"] == 8 << 30
