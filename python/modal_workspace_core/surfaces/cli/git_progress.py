"""git's own progress lines ("Receiving objects:  45% (3/6)", rewritten in place with `\\r`) read
into a phase, a count and a total for a bar, and the lines that are not progress kept for a
person to read when the clone fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["GitProgress"]

# "remote: Counting objects:  16% (1/6)", "Receiving objects: 100% (6/6), 1.2 KiB | …, done."
_PROGRESS = re.compile(
    r"^(?:remote: )?(?P<phase>[A-Z][A-Za-z ]+?):\s+\d+% \((?P<done>\d+)/(?P<total>\d+)\)"
)


@dataclass
class GitProgress:
    """What git's stderr said so far: its latest phase and counts, and its other lines."""

    phase: str | None = None
    done: int = 0
    total: int = 0
    lines: list[str] = field(default_factory=list)
    _partial: str = ""

    def feed(self, text: str) -> bool:
        """Reads more of git's stderr; whether the phase or counts moved."""
        moved = False
        parts = re.split(r"(\r|\n)", self._partial + text)
        # The last part may be cut mid-line: kept for the next read.
        self._partial = parts.pop()
        for part in parts:
            if part in ("\r", "\n") or not part.strip():
                continue
            match = _PROGRESS.match(part.strip())
            if match:
                self.phase = match["phase"]
                self.done, self.total = int(match["done"]), int(match["total"])
                moved = True
            elif part.strip() not in self.lines:
                self.lines.append(part.strip())
        return moved
