"""The README read as a reader follows it: its fenced blocks in order, its console transcripts
split into commands and what each printed, a bash session that runs them one after another (so
that what one sets, the next one has), and the rule by which a printed transcript matches a
real run.

A transcript line matches a real line when they are equal but for what differs at every run:
ids (`ws-` and 32 hex digits), times, ports on 127.0.0.1, stream sequence numbers and a test's
duration; `…` in the README stands for anything (it trims long output). The lines of a
transcript appear in the run in order, with others between allowed, except for the output of
streamed commands, which arrives in chunks the README cannot predict: the text of its `stdout`
and `stderr` events is compared whole, and the page boundaries (`-- next_cursor=… done=false`)
not at all.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .readme import README

__all__ = ["Block", "Command", "ShellSession", "commands_of", "matches", "readme_blocks"]


@dataclass
class Block:
    language: str
    code: str
    marker: str | None  # the `<!-- readme-test: NAME -->` before it, if any
    line: int  # where it starts in the README


@dataclass
class Command:
    text: str
    printed: list[str] = field(default_factory=list)


def readme_blocks() -> list[Block]:
    """Every fenced block of the README, in order."""
    text = README.read_text()
    blocks = []
    for found in re.finditer(
        r"(?:^<!-- readme-test: ([\w-]+) -->\n)?^```(\w*)\n(.*?)^```$", text, re.M | re.S
    ):
        line = text.count("\n", 0, found.start()) + 1
        blocks.append(Block(found.group(2), found.group(3), found.group(1), line))
    return blocks


def _complete(script: str) -> bool:
    """Whether bash would run `script` as it is (not waiting for a `}` or a continued line)."""
    checked = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    return checked.returncode == 0 and not script.rstrip().endswith("\\")


def commands_of(console: str) -> list[Command]:
    """A console transcript's commands (`$ ` lines and their continuations) and what each
    printed."""
    commands: list[Command] = []
    open_command: list[str] | None = None
    for line in console.splitlines():
        if open_command is not None:
            open_command.append(line)
            if _complete("\n".join(open_command)):
                commands[-1].text = "\n".join(open_command)
                open_command = None
            continue
        if line.startswith("$ "):
            commands.append(Command(line[2:]))
            if not _complete(line[2:]):
                open_command = [line[2:]]
        else:
            assert commands, f"output before any command: {line!r}"
            commands[-1].printed.append(line)
    assert open_command is None, f"a command never ends: {open_command}"
    return commands


# What differs at every run, as the README shows it, and what a run may have there instead.
_VARYING = re.compile(
    r"(?P<dots>…)"
    r"|(?P<id>\b(?:ws|ex|sn|tk)-[0-9a-f]{32}\b)"
    r"|(?P<hex>\b[0-9a-f]{32}\b)"
    r"|(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z)"
    r"|(?P<port>127\.0\.0\.1:\d+)"
    r'|(?P<seq>"seq":\d+)'
    r"|(?P<cursor>next_cursor=\d+)"
    r"|(?P<seconds>\b\d+\.\d+s\b)"
    r"|(?P<pid>\[\d+\])"
)
_ANY = {
    "dots": ".*?",
    "hex": "[0-9a-f]{32}",
    "time": r"\d{4}-\d\d-\d\dT[\d:.]+Z",
    "port": r"127\.0\.0\.1:\d+",
    "seq": r'"seq":\d+',
    "cursor": r"next_cursor=\d+",
    "seconds": r"\d+\.\d+s",
    "pid": r"\[\d+\]",
}


def _pattern(printed: str) -> re.Pattern[str]:
    """The runs `printed` stands for."""
    parts, at = [], 0
    for found in _VARYING.finditer(printed):
        parts.append(re.escape(printed[at : found.start()]))
        kind = found.lastgroup or "dots"
        parts.append(found[0][:3] + "[0-9a-f]{32}" if kind == "id" else _ANY[kind])
        at = found.end()
    parts.append(re.escape(printed[at:]))
    return re.compile("".join(parts), re.S)


def _stream_event(line: str) -> dict[str, object] | None:
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if isinstance(event, dict) and event.get("type") in ("stdout", "stderr") and "seq" in event:
        return event
    return None


def matches(printed: list[str], ran: list[str]) -> str | None:
    """None when the run matches the transcript; else what does not."""
    printed = list(printed)
    while printed and not printed[-1].strip():
        printed.pop()  # a blank line closing a transcript's output is the README's, not output
    streams: dict[str, tuple[list[str], list[str]]] = {}
    wanted = []
    for line in printed:
        event = _stream_event(line)
        if event is not None:
            streams.setdefault(str(event["type"]), ([], []))[0].append(str(event.get("data", "")))
        elif not re.fullmatch(r"-- next_cursor=\d+ done=false", line):
            wanted.append(line)
    for line in ran:
        event = _stream_event(line)
        if event is not None:
            streams.setdefault(str(event["type"]), ([], []))[1].append(str(event.get("data", "")))
    for name, (shown, got) in streams.items():
        if not _pattern("".join(shown)).fullmatch("".join(got)):
            return f"{name} was {''.join(got)!r}, the README shows {''.join(shown)!r}"
    at = 0
    for line in wanted:
        pattern = _pattern(line.rstrip())
        while at < len(ran) and not pattern.fullmatch(ran[at].rstrip()):
            at += 1
        if at == len(ran):
            return f"no line (in order) like {line!r} in:\n" + "\n".join(ran)
        at += 1
    return None


class ShellSession:
    """One bash process that runs commands one after another in `cwd`, as a reader's terminal
    does: variables and functions one command sets, the next has."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.stderr = cwd / "session.stderr"
        self._mark = f"__done_{uuid.uuid4().hex}"
        self._process = subprocess.Popen(
            ["bash", "--norc", "--noprofile"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr.open("wb"),
            bufsize=0,
        )
        self._pending = b""

    def run(self, command: str, timeout: float = 240) -> tuple[int, list[str]]:
        """The command's exit status and the lines it printed."""
        assert self._process.stdin is not None and self._process.stdout is not None
        script = f"{command}\nprintf '\\n{self._mark} %d\\n' $?\n"
        self._process.stdin.write(script.encode())
        deadline = time.monotonic() + timeout
        end = re.compile(rb"\n" + self._mark.encode() + rb" (\d+)\n")
        while not (found := end.search(self._pending)):
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"{command!r} ran past {timeout} s:\n{self._pending.decode()}"
            if select.select([self._process.stdout], [], [], remaining)[0]:
                chunk = os.read(self._process.stdout.fileno(), 65536)
                assert chunk, f"the shell ended during {command!r}: {self.stderr.read_text()}"
                self._pending += chunk
        output, self._pending = self._pending[: found.start()], self._pending[found.end() :]
        lines = output.decode(errors="replace").split("\n")
        while lines and not lines[-1]:
            lines.pop()
        return int(found.group(1)), lines

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
