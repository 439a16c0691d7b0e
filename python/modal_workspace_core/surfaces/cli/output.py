"""What a command shows, and where: its result on stdout (for people, or with `--json` one JSON
document and nothing else there), and progress, spinners and messages on stderr, drawn only
when stderr is a terminal (a script that captures it gets the messages, not the bars).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)

__all__ = ["Output"]

# Wide enough that an id and a time never wrap when stdout is a file or a pipe.
_PIPE_WIDTH = 200


class Output:
    """One command's output: `json_mode` from its `--json`."""

    def __init__(self, json_mode: bool) -> None:
        self.json_mode = json_mode
        piped = not sys.stdout.isatty()
        self.out = Console(width=_PIPE_WIDTH if piped else None, highlight=False)
        self.err = Console(stderr=True, highlight=False)

    @property
    def live(self) -> bool:
        """Whether bars and spinners are drawn: stderr is a terminal and no script reads JSON."""
        return self.err.is_terminal and not self.json_mode

    def result(self, document: Any, human: Callable[[], None] | str) -> None:
        """The command's result: `document` as JSON with `--json`, else `human` (a line, or a
        function that prints it)."""
        if self.json_mode:
            sys.stdout.write(json.dumps(document, ensure_ascii=False) + "\n")
            sys.stdout.flush()
        elif isinstance(human, str):
            self.out.print(human, markup=False, soft_wrap=True)
        else:
            human()

    def note(self, text: str) -> None:
        """A line for the person, on stderr (with `--json` too: stdout holds the document)."""
        self.err.print(text, markup=False, soft_wrap=True)

    def error(self, code: str, message: str, field: str | None = None) -> None:
        """A failure: one line on stderr, and with `--json` the error document on stdout (the
        shape REST answers), so that a script reading stdout still gets one document."""
        where = f" (field {field})" if field else ""
        print(f"modal-workspace: {code}: {message}{where}", file=sys.stderr, flush=True)
        if self.json_mode:
            body: dict[str, Any] = {"code": code, "message": message}
            if field is not None:
                body["field"] = field
            sys.stdout.write(json.dumps({"error": body}) + "\n")
            sys.stdout.flush()

    @contextlib.contextmanager
    def status(self, text: str) -> Iterator[None]:
        """A spinner beside `text` while the block runs (nothing when not drawn)."""
        if not self.live:
            yield
            return
        with self.err.status(text):
            yield

    @contextlib.contextmanager
    def bytes_bar(self, description: str, total: int) -> Iterator[Callable[[int], None]]:
        """A bar of bytes moved (`total` of them); yields the function that adds to it."""
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=self.err,
            disable=not self.live,
            transient=True,
        )
        with progress:
            task = progress.add_task(description, total=total or None)

            def advance(n: int) -> None:
                progress.advance(task, n)

            yield advance

    @contextlib.contextmanager
    def steps_bar(self, description: str) -> Iterator[StepsBar]:
        """A bar of work whose phases and totals arrive as it goes (git's progress, a
        snapshot's bytes); yields what updates it."""
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            console=self.err,
            disable=not self.live,
            transient=True,
        )
        with progress:
            yield StepsBar(progress, progress.add_task(description, total=None))


class StepsBar:
    """A bar whose description, total and position the work sets as it reports them."""

    def __init__(self, progress: Progress, task: Any) -> None:
        self._progress = progress
        self._task = task

    def update(
        self, description: str | None = None, done: float | None = None, total: float | None = None
    ) -> None:
        fields: dict[str, Any] = {}
        if description is not None:
            fields["description"] = description
        if total is not None:
            fields["total"] = total
        if done is not None:
            fields["completed"] = done
        self._progress.update(self._task, **fields)
