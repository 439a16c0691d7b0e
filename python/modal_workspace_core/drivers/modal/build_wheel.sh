#!/bin/sh
# Builds this project's wheel from a source tree into a directory: what the image builder stage
# runs inside Modal (python/modal_workspace_core/drivers/modal/wheel_stage.py), and what a test
# runs on Linux against a copy of the source. Usage: build_wheel.sh SOURCE_DIR OUT_DIR
set -eu
src=$1
out=$2
python=${PYTHON:-python}
# maturin comes from the stage's own pip install; a machine that already has it (the tests)
# builds offline.
"$python" -m maturin --version >/dev/null
mkdir -p "$out"
cd "$src"
# `linux`: a plain Linux tag, installable on the Debian images this project builds (no
# manylinux audit, which would need patchelf and gains nothing inside our own images).
"$python" -m maturin build --release --locked --compatibility linux --interpreter "$python" \
    --out "$out"
