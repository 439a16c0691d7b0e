"""xterm.js for the terminal page, from a registry package and never a CDN: the copy the PyPI
package `webssh` ships (xterm.js 4.x and its fit addon, as released, minified), read from
the installed distribution without importing it. docs/terminal.md says why this package and
not Debian's `libjs-xterm`.

The files are served only when their bytes are the ones reviewed (`REVIEWED`): a release of
the package that changes them makes the terminal page answer that it is unavailable (and its
test fail) rather than hand a browser script nobody looked at.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

__all__ = ["REVIEWED", "Asset", "xterm_assets"]

_PACKAGE = "webssh"


@dataclass(frozen=True)
class Asset:
    text: str
    media_type: str


# The name the page loads each file by: its path in the package and the SHA-256 of its bytes.
REVIEWED: dict[str, tuple[str, str]] = {
    "xterm.js": (
        "webssh/static/js/xterm.min.js",
        "96a52b10e7bf0ae6150588b72649fe4335116c5a98ddafe608037234ab653178",
    ),
    "xterm-addon-fit.js": (
        "webssh/static/js/xterm-addon-fit.min.js",
        "247435fe116bb4230fc7d45b34f4cf1478dd3adc63fdcdae33daba5b32795a59",
    ),
    "xterm.css": (
        "webssh/static/css/xterm.min.css",
        "09ae6bd4cc0f559c4c77b5cec7451ae686fd815d09c586cfd819630cd25709f9",
    ),
}
_MEDIA = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


@cache
def xterm_assets() -> dict[str, Asset]:
    """The reviewed files by the name the page loads them by. Raises `RuntimeError` when the
    package is missing or a file is not the one reviewed."""
    try:
        dist = importlib.metadata.distribution(_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError(
            f"the terminal page needs xterm.js from the package {_PACKAGE!r}: pip install it"
        ) from None
    assets = {}
    for name, (path, digest) in REVIEWED.items():
        data = Path(str(dist.locate_file(path))).read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise RuntimeError(
                f"{_PACKAGE} {dist.version}'s {path} is not the file reviewed for the terminal "
                "page: review the new one and update REVIEWED"
            )
        assets[name] = Asset(data.decode("utf-8"), _MEDIA[name[name.rindex(".") :]])
    return assets
