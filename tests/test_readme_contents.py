"""The README's contents list every section and the ways of connecting an agent, in the order
they come, how-tos before reference, each link to a heading that exists."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
# The how-tos, in order; every other section is reference and comes after them.
HOW_TOS = [
    "Two commands",
    "Serving",
    "Walkthrough",
    "The CLI",
    "Connecting an agent",
    "Patching files",
    "Artifacts",
    "Snapshots and forks",
    "Templates",
    "Metrics",
    "Experiments",
    "The terminal",
    "Previews",
    "Delivering the work",
    "Modal Functions",
    "Deploying on Modal",
]
# The section whose subsections are listed too (one per kind of client).
LISTED_WITH_SUBSECTIONS = "Connecting an agent"


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^a-z0-9 \-]", "", heading.lower()).replace(" ", "-")


def headings(text: str) -> list[tuple[int, str]]:
    """(level, text) of each `##` and `###` heading outside fenced code."""
    found, fenced = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"(#{2,3}) (.+)", line)):
            found.append((len(match.group(1)), match.group(2)))
    return found


def contents(text: str) -> str:
    """The contents block the README should hold."""
    sections: dict[str, list[str]] = {}
    for level, title in headings(text):
        if level == 2 and title != "Contents":
            current = sections.setdefault(title, [])
        elif level == 3 and sections:
            current.append(title)
    reference = [title for title in sections if title not in HOW_TOS]
    lines = ["## Contents", "", "How-tos:", ""]
    for title in HOW_TOS:
        line = f"- [{title}](#{anchor(title)})"
        if title == LISTED_WITH_SUBSECTIONS:
            line += ": " + ", ".join(f"[{s}](#{anchor(s)})" for s in sections[title])
        lines.append(line)
    lines += ["", "Reference:", ""] + [f"- [{t}](#{anchor(t)})" for t in reference]
    return "\n".join(lines) + "\n"


def test_the_contents_match_the_sections() -> None:
    text = README.read_text()
    start = text.index("## Contents\n")
    end = text.index("\n## ", start + 1) + 1
    assert text[start:end].strip() == contents(text).strip()


def test_how_tos_come_before_reference() -> None:
    order = [title for level, title in headings(README.read_text()) if level == 2]
    assert order[1 : len(HOW_TOS) + 1] == HOW_TOS, order


def test_every_link_to_a_heading_finds_one() -> None:
    text = README.read_text()
    anchors = {anchor(title) for _, title in headings(text)}
    for target in re.findall(r"\]\(#([^)]+)\)", text):
        assert target in anchors, target
