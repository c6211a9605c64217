#!/usr/bin/env bash
# Run HERE (with network) before going to an offline GPU box: downloads into .whl/ the wheels
# that scripts/gpu_check.sh needs and the box lacks, for the box's Python (default 3.12,
# manylinux x86_64). torch and triton are NOT downloaded: the box's CUDA builds are used.
#
#   scripts/gpu_wheels.sh            # then copy the whole checkout (with .whl/) to the box
#   PY_VERSION=3.11 scripts/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY_VERSION="${PY_VERSION:-3.12}"
PIP="${PIP:-python3 -m pip}"
DEST=.whl
mkdir -p "$DEST"
# Only what the box (Python 3.12, torch 2.11, Triton 3.6, numpy, pandas, pytest) lacks: the
# HTML reports' plotly with its narwhals, nvtx (trace ranges; the one binary wheel), pandas'
# pytz and tzdata. --no-deps: every needed wheel is named here.
WHEELS=("plotly>=5.20" "narwhals>=1.15" "nvtx>=0.2.10" "pytz" "tzdata")
$PIP download --only-binary=:all: --no-deps --python-version "$PY_VERSION" \
    --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --dest "$DEST" "${WHEELS[@]}"
ls -1 "$DEST"/*.whl | wc -l | xargs echo "wheels in $DEST:"
