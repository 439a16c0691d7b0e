"""The README's marked code blocks, as the tests that run or parse them read them."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent.parent / "README.md"


def readme_block(name: str, language: str = "python") -> str:
    """The code of the fenced block right after `<!-- readme-test: NAME -->` in the README."""
    marked = re.findall(
        rf"^<!-- readme-test: {re.escape(name)} -->\n```{language}\n(.*?)^```$",
        README.read_text(),
        flags=re.MULTILINE | re.DOTALL,
    )
    assert len(marked) == 1, f"the README has {len(marked)} blocks marked {name!r}"
    return str(marked[0])
