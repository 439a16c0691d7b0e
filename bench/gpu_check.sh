#!/usr/bin/env bash
# The GPU check (bench/README.md): on a Linux machine with an NVIDIA GPU and nothing of ours
# running, builds the project into a temporary directory of its own, then runs
# bench/gpu_check.py: an agent daemon samples the GPUs for --seconds (30) under a small CUDA load
# where a PyTorch with CUDA is found or pip installs one, and the samples, the sampler's CPU cost
# and a verdict are printed. Exits 0 when the GPU fields were there, 1 when not, 2 without
# nvidia-smi. Needs no root; leaves nothing behind but the build cache in the checkout's target/.
#
#   bash bench/gpu_check.sh [--wheel FILE] [--seconds 30] [--no-torch] [gpu_check.py's options]
#
# It builds a wheel with maturin (from the PATH, else pip installs it into the temporary
# directory) for $PYTHON (default python3, 3.11 or newer) and installs it with pip --target
# there, without dependencies: the agent and its client need only the compiled core. Not a
# virtualenv, so that the check runs with the machine's own Python, and finds its PyTorch.
# --wheel FILE installs a wheel built elsewhere instead (a machine without Rust or a network).
set -euo pipefail

bench=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$bench")
python=${PYTHON:-python3}
wheel=""
args=()
while (($#)); do
  case $1 in
    --wheel)
      wheel=$(realpath "$2")
      shift 2
      ;;
    *)
      args+=("$1")
      shift
      ;;
  esac
done

if ! command -v nvidia-smi >/dev/null; then
  echo "gpu_check: no nvidia-smi on the PATH: this check needs an NVIDIA GPU and its driver" >&2
  exit 2
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "gpu_check: needs Python 3.11 or newer as \$PYTHON (default python3)" >&2
  exit 2
fi

# pip warns of root on every call; root is fine here: all goes into the temporary directory.
export PIP_ROOT_USER_ACTION=ignore

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mwc-gpu.XXXXXX")
helper=""
# shellcheck disable=SC2317  # run by the trap
cleanup() {
  # The check ends its daemon and its load when told to; then the directory goes.
  if [[ -n $helper ]]; then
    kill -TERM "$helper" 2>/dev/null || true
    wait "$helper" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

echo "== the GPUs, as nvidia-smi lists them"
# Bounded: a driver in trouble can hang nvidia-smi, and the check then says what the agent read.
timeout 30 nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader ||
  echo "(nvidia-smi failed; going on)"

if [[ -z $wheel ]]; then
  echo "== building the project's wheel (release; the first build takes minutes)"
  maturin=$(command -v maturin || true)
  if [[ -z $maturin ]]; then
    "$python" -m pip install --quiet --disable-pip-version-check --target "$tmp/tools" \
      "maturin>=1.9.4,<2"
    maturin=$tmp/tools/bin/maturin
  fi
  (cd "$repo" && "$maturin" build --release --quiet --interpreter "$python" --out "$tmp/wheels")
  wheel=$(echo "$tmp"/wheels/*.whl)
fi
echo "== installing $(basename "$wheel")"
"$python" -m pip install --quiet --disable-pip-version-check --no-index --no-deps \
  --target "$tmp/site" "$wheel"

echo "== the check"
# In the background and waited for, so that a signal to this script reaches the trap at once.
PYTHONPATH="$tmp/site${PYTHONPATH:+:$PYTHONPATH}" "$python" "$bench/gpu_check.py" \
  --install-torch "$tmp/torch" ${args[@]+"${args[@]}"} &
helper=$!
status=0
wait "$helper" || status=$?
helper=""
exit "$status"
