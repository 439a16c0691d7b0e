"""A run drawn as a PNG, for people and for models that read curves better than numbers: one
panel per metric the command reported (up to `MAX_PANELS`, by name), and the workspace's own
CPU and memory over the run where its metrics stream was read. Drawn with matplotlib's object
API on its Agg canvas (no global figure state, so two drawings in two threads never meet), in a
worker thread: a drawing takes a few hundred milliseconds of CPU. Names and values are the
workspace's: they are drawn as text, never interpreted (mathtext is off).
"""

from __future__ import annotations

import asyncio
import io
import math

from .experiment_records import RunRecord, RunSeries

__all__ = ["HEIGHT", "MAX_PANELS", "WIDTH", "panels", "render_png"]

WIDTH, HEIGHT = 1000, 640  # pixels
MAX_PANELS = 6
_DPI = 100


async def render_png(run: RunRecord, series: RunSeries) -> bytes:
    return await asyncio.to_thread(_render, run, series)


def panels(run: RunRecord, series: RunSeries) -> list[tuple[str, list[tuple[float, float]]]]:
    reported = sorted(series.points.items())[:MAX_PANELS]
    system = sorted(series.system.items())
    return [(name, points) for name, points in [*system, *reported] if points][:MAX_PANELS]


def _render(run: RunRecord, series: RunSeries) -> bytes:
    # Imported here: only a drawing needs matplotlib (and it takes a while to import).
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    drawn = panels(run, series)
    columns = 2 if len(drawn) > 1 else 1
    rows = max(1, math.ceil(len(drawn) / columns))
    figure = Figure(figsize=(WIDTH / _DPI, HEIGHT / _DPI), dpi=_DPI, layout="constrained")
    FigureCanvasAgg(figure)
    title = f"{run.name or run.run_id} · {run.state}"
    if run.wall_seconds is not None:
        title += f" · {run.wall_seconds:.1f} s"
    figure.suptitle(title, usetex=False, fontsize=12, parse_math=False)
    if not drawn:
        axes = figure.add_subplot(1, 1, 1)
        axes.text(0.5, 0.5, "no metrics reported yet", ha="center", va="center", parse_math=False)
        axes.set_axis_off()
    for i, (name, points) in enumerate(drawn):
        axes = figure.add_subplot(rows, columns, i + 1)
        xs = [p[0] for p in points]
        ys = [p[1] for p in points]
        axes.plot(xs, ys, marker="." if len(points) < 50 else None, linewidth=1.4)
        axes.set_title(name, fontsize=10, parse_math=False)
        axes.set_xlabel("seconds since start", fontsize=8)
        axes.grid(True, alpha=0.3)
        axes.tick_params(labelsize=8)
    out = io.BytesIO()
    figure.savefig(out, format="png", dpi=_DPI, metadata={"Software": None})
    return out.getvalue()
