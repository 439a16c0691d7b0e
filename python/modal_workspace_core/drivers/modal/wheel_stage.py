"""How this project's wheel gets into a Modal image: built inside Modal's image build from a
checkout's source (a builder stage with the Rust toolchain, so a deploy needs nothing but `modal`
on the deploying machine, whatever its OS), or a wheel built elsewhere, uploaded as it is.

The builder stage is one image layer holding a two-stage Dockerfile: stage 0 (the SDK's
`FROM base`) installs the toolchain, copies the source and runs `build_wheel.sh`; stage 1 starts
again from the same base and copies only the wheel. Modal caches the layer by its definition,
which includes the build context: the context holds exactly what `maturin build` reads
(`SOURCE_FILES`, `SOURCE_DIRS`, less `ignored` files), so a change elsewhere does not rebuild.

It imports nothing of this package: `modal_app.py` loads it by its path on a machine where only
`modal` is installed.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import modal

__all__ = [
    "BUILD_SCRIPT",
    "RUST_TOOLCHAIN",
    "SOURCE_DIRS",
    "SOURCE_FILES",
    "WHEEL_DIR",
    "Checkout",
    "LocalWheel",
    "WheelSource",
    "find_checkout",
    "ignored",
]

# At least Cargo.toml's `rust-version` (a test holds the two together).
RUST_TOOLCHAIN = "1.95.0"
MATURIN = "maturin>=1.9.4,<2"
# Everything `maturin build` reads of a checkout: the crate, the Python package, and the files
# pyproject.toml names (its readme).
SOURCE_FILES = ("Cargo.toml", "Cargo.lock", "pyproject.toml", "README.md")
SOURCE_DIRS = ("src", "python")
BUILD_SCRIPT = "python/modal_workspace_core/drivers/modal/build_wheel.sh"
# Where the wheel lands inside images, so an image's wheel can be found and installed again.
WHEEL_DIR = "/opt/modal-workspace/wheels"
_BUILD_ROOT = "/opt/modal-workspace/build"
# Never part of the build context, wherever they appear under the source directories: caches,
# compiled extensions from an in-place build (`maturin develop`), editor and VCS files, and any
# hidden file (`.env`, `.git`): the source needs none of them, and a secret may hide there.
_IGNORED_NAMES = frozenset({"__pycache__", "target", "node_modules"})
_IGNORED_SUFFIXES = (".so", ".pyd", ".dylib", ".dll", ".pyc", ".pyo", ".whl", ".swp")


def ignored(relative: Path) -> bool:
    """Whether a path of the checkout (relative to it) stays out of the build context."""
    parts = PurePosixPath(relative.as_posix()).parts
    if any(part.startswith(".") or part in _IGNORED_NAMES for part in parts):
        return True
    return relative.name.endswith(_IGNORED_SUFFIXES)


def is_checkout(path: Path) -> bool:
    return all((path / name).is_file() for name in SOURCE_FILES) and all(
        (path / name).is_dir() for name in SOURCE_DIRS
    )


def find_checkout(start: Path | None = None) -> Path | None:
    """The checkout this package was imported from (an editable install), if it was; `start`
    (a file or directory inside a checkout, such as `modal_app.py`) to look from elsewhere."""
    here = (start or Path(__file__)).resolve()
    for candidate in (here, *here.parents):
        if candidate.is_dir() and is_checkout(candidate):
            return candidate
    return None


@dataclass(frozen=True)
class LocalWheel:
    """A wheel built elsewhere (`MODAL_WORKSPACE_WHEEL`, or the one inside the gateway's own
    image), uploaded into the image as it is: it must be a Linux x86-64 wheel."""

    path: Path

    def stamp(self) -> tuple[object, ...]:
        """Cheap to read, and changed by any rewrite of the wheel (its size or its time)."""
        stat = self.path.stat()
        return (str(self.path.resolve()), stat.st_size, stat.st_mtime_ns)

    def digest(self) -> str:
        return "wheel:" + _sha256(self.path.read_bytes())

    def install(self, image: modal.Image, installer: str) -> modal.Image:
        remote = f"{WHEEL_DIR}/{self.path.name}"
        return image.add_local_file(self.path, remote, copy=True).run_commands(
            f"{installer} {shlex.quote(remote)}"
        )


@dataclass(frozen=True)
class Checkout:
    """A checkout's source, built into a wheel by the image's builder stage."""

    root: Path

    def files(self) -> list[str]:
        """The build context: what `COPY` takes of the checkout, less what `ignored` drops
        (relative POSIX paths, sorted). The SDK selects the same files (tests compare)."""
        out = [name for name in SOURCE_FILES if (self.root / name).is_file()]
        for top in SOURCE_DIRS:
            for dirpath, dirnames, filenames in os.walk(self.root / top):
                base = Path(dirpath).relative_to(self.root)
                dirnames[:] = sorted(d for d in dirnames if not ignored(base / d))
                out.extend((base / f).as_posix() for f in filenames if not ignored(base / f))
        return sorted(out)

    def stamp(self) -> tuple[object, ...]:
        """Each file of the build context with its size and time: changed by any edit."""
        out: list[object] = [str(self.root)]
        for name in self.files():
            stat = (self.root / name).stat()
            out.append((name, stat.st_size, stat.st_mtime_ns))
        return tuple(out)

    def digest(self) -> str:
        """The source's identity: a change to any file of the build context changes it."""
        h = hashlib.sha256()
        for name in self.files():
            data = (self.root / name).read_bytes()
            h.update(f"{name}\0{len(data)}\0".encode())
            h.update(data)
        return "source:" + h.hexdigest()

    def install(self, image: modal.Image, installer: str) -> modal.Image:
        return image.dockerfile_commands(
            builder_commands(installer), context_dir=self.root, ignore=ignored
        )


WheelSource = LocalWheel | Checkout


def builder_commands(installer: str) -> list[str]:
    """The layer's Dockerfile after the SDK's `FROM base`: stage 0 builds, stage 1 installs."""
    src = f"{_BUILD_ROOT}/src"
    out = f"{_BUILD_ROOT}/wheels"
    # Downloaded first, so that a failed download fails this step (a pipe into sh would not).
    rustup = (
        "curl --proto '=https' --tlsv1.2 -sSf -o /tmp/rustup-init.sh https://sh.rustup.rs && "
        f"sh /tmp/rustup-init.sh -y --no-modify-path --profile minimal "
        f"--default-toolchain {RUST_TOOLCHAIN} && rm /tmp/rustup-init.sh"
    )
    return [
        # Stage 0, the builder: a C compiler and linker for the crate, the Rust toolchain from
        # rustup (Debian's rustc is older than the crate's rust-version), maturin.
        "RUN apt-get update && apt-get install -y --no-install-recommends "
        "ca-certificates curl gcc libc6-dev && rm -rf /var/lib/apt/lists/*",
        f"RUN {rustup}",
        "ENV PATH=/root/.cargo/bin:$PATH",
        f"RUN python -m pip install --no-cache-dir '{MATURIN}'",
        *(f"COPY {name} {src}/{name}" for name in SOURCE_FILES),
        *(f"COPY {name} {src}/{name}" for name in SOURCE_DIRS),
        f"RUN sh {src}/{BUILD_SCRIPT} {src} {out}",
        # Stage 1, what the image keeps: the base again, with the wheel only.
        "FROM base",
        f"COPY --from=0 {out}/ {WHEEL_DIR}/",
        f"RUN {installer} {WHEEL_DIR}/modal_workspace_core-*.whl",
    ]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
