#!/usr/bin/env bash
# The one script to run on a lent GPU: GPU kernel tests, the benchmark suite at full size and
# a real-shape strategy comparison, all written to the folder given as the first argument.
# Installs nothing heavy: expects torch (CUDA build), triton and kvbench already installed
# (`pip install -e '.[dev]'`). Budget: under 8 minutes on one H100/H200-class GPU.
set -uo pipefail
OUT="${1:?usage: scripts/gpu_check.sh OUTPUT_FOLDER}"
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
log() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$OUT/gpu_check.log"; }

log "environment"
{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    "$PY" - <<'PY'
import torch, triton, kvbench
print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__,
      "kvbench", kvbench.__version__, "device", torch.cuda.get_device_name())
PY
    git rev-parse --short HEAD 2>/dev/null || true
} > "$OUT/environment.txt" 2>&1

log "GPU kernel tests"
timeout 150 "$PY" -m pytest -q -m gpu tests/kernels --junitxml="$OUT/gpu-tests.xml" \
    > "$OUT/gpu-tests.txt" 2>&1
log "gpu tests exit $?"

log "benchmarks at full size"
timeout 200 "$PY" -m pytest -q tests/benchmarks/test_kernel_benchmarks.py \
    --benchmark-json="$OUT/benchmarks.json" > "$OUT/benchmarks.txt" 2>&1
log "benchmarks exit $?"

log "strategy comparison on a real-shape preset (dummy weights)"
timeout 150 kvbench run --strategy all --workload sharegpt --model llama-3-8b --dtype bfloat16 \
    --num-requests 200 --max-model-len 4096 --gpu-memory-utilization 0.9 \
    --out "$OUT/runs" --quiet > "$OUT/run.txt" 2>&1
log "run exit $?"

log "simulated counterpart (calibration of the cost model)"
timeout 60 kvbench simulate --strategy paged --workload sharegpt --model llama-3-8b \
    --gpu h200 --num-requests 200 --max-model-len 4096 --out "$OUT/sim" --quiet \
    > "$OUT/simulate.txt" 2>&1
log "simulate exit $?"
log "done"
