"""What an experiment's page shows of a run, as text: its name, state, timings and metrics,
formatted once here for the page as served and for each refresh it reads (`run.json`), so the
script that refreshes it only places text. Every value may be the workspace's: it is text,
never markup, on both paths.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

__all__ = ["run_view"]

# How a value a command reported is written: enough digits to tell two steps apart.
_DIGITS = 6


def run_view(run: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """The page's view of `run` (an experiment's record as `experiment_get` answers it):
    `facts` in order, `metrics` as table rows, and `version`, which changes when what the plot
    draws may have (so the page fetches the picture again only then)."""
    state = str(run.get("state", ""))
    started = _instant(run.get("started_at"))
    ended = _instant(run.get("ended_at"))
    facts = [("Run", str(run.get("run_id", ""))), ("Started", _when(started))]
    if state == "running":
        elapsed = ((now or datetime.now(UTC)) - started).total_seconds() if started else None
        facts.append(("Running for", _seconds(elapsed)))
    else:
        facts.append(("Ended", _when(ended)))
        facts.append(("Wall time", _seconds(run.get("wall_seconds"))))
        returncode = run.get("returncode")
        facts.append(("Exit code", "—" if returncode is None else str(returncode)))
    if run.get("error"):
        facts.append(("Error", str(run["error"])))
    metrics = [
        [
            str(name),
            _number(m.get("last")),
            _number(m.get("min")),
            _number(m.get("max")),
            str(m.get("count", "")),
        ]
        for name, m in sorted((run.get("metrics") or {}).items())
        if isinstance(m, dict)
    ]
    drawn = json.dumps(
        [state, run.get("ended_at"), run.get("metrics"), run.get("system")],
        sort_keys=True,
        default=str,
    )
    return {
        "name": str(run.get("name") or run.get("run_id", "")),
        "state": state,
        "live": state == "running",
        "facts": facts,
        "metrics": metrics,
        "version": hashlib.sha256(drawn.encode()).hexdigest()[:16],
    }


def _instant(stamp: object) -> datetime | None:
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def _when(instant: datetime | None) -> str:
    return instant.strftime("%Y-%m-%d %H:%M:%S UTC") if instant else "—"


def _seconds(value: object) -> str:
    if not isinstance(value, int | float):
        return "—"
    seconds = max(0.0, float(value))
    if seconds < 120:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {rest:02d} s"


def _number(value: object) -> str:
    return f"{value:.{_DIGITS}g}" if isinstance(value, int | float) else "—"
