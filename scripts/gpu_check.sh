#!/usr/bin/env bash
# The one call to make on a lent GPU box (bare and offline is fine), in under 9 minutes:
# kernel tests on CUDA, kernel benchmarks, a real-shape strategy comparison and its simulated
# counterpart, all written to OUT; one summary table at the end; exit 1 when any part failed,
# 2 when there is no CUDA device (checked first, nothing else runs).
#
#   scripts/gpu_wheels.sh                       # before, on a machine with network (.whl/)
#   scripts/gpu_check.sh results/reference/<date>-<gpu>     # on the GPU box
#
# Needs on the box: Python >= 3.11 with a CUDA build of torch and triton. Everything else is
# taken from .whl/ (only what the box lacks, into .whl/site, never into its site-packages);
# kvbench runs from this checkout without being installed (scripts/pyshim).
set -uo pipefail
OUT="${1:?usage: scripts/gpu_check.sh OUTPUT_FOLDER}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    if command -v python3 >/dev/null 2>&1; then PY=python3; else PY=python; fi
fi
fail() { echo "gpu_check: error: $*" >&2; exit 2; }
command -v "$PY" >/dev/null 2>&1 || fail "no python3 or python on PATH (set PYTHON=...)"

# 1. CUDA first: on a machine without it, stop at once.
cuda_msg="$("$PY" -c 'import torch
if not torch.cuda.is_available():
    raise SystemExit("torch %s sees no CUDA device (torch.cuda.is_available() is False)" % torch.__version__)
print(torch.cuda.get_device_name())' 2>&1)" \
    || fail "${cuda_msg##*$'\n'}; run this on a machine with an NVIDIA GPU and a CUDA build of torch"

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/gpu_check.log"
log() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$LOG"; }

# 2. Missing pure-Python/binary dependencies from .whl/ into .whl/site (module:wheel prefix).
DEPS="$REPO/.whl/site"
NEEDED="plotly:plotly narwhals:narwhals nvtx:nvtx pynvml:nvidia_ml_py numpy:numpy pandas:pandas
dateutil:python_dateutil pytz:pytz tzdata:tzdata six:six click:click safetensors:safetensors
packaging:packaging pytest:pytest pluggy:pluggy iniconfig:iniconfig
pytest_benchmark:pytest_benchmark cpuinfo:py_cpuinfo hypothesis:hypothesis
sortedcontainers:sortedcontainers attr:attrs"
missing=()
for pair in $NEEDED; do
    module="${pair%%:*}"; wheel="${pair##*:}"
    "$PY" -c "import $module" >/dev/null 2>&1 && continue
    found=$(ls "$REPO"/.whl/"$wheel"-*.whl 2>/dev/null | head -1)
    [ -n "$found" ] || fail "python module '$module' is missing and .whl/ has no $wheel wheel: run scripts/gpu_wheels.sh on a machine with network, then copy .whl/ here"
    missing+=("$found")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${#missing[@]} missing wheel(s) into .whl/site"
    "$PY" -m pip install -q --no-deps --no-index --no-build-isolation --target "$DEPS" \
        "${missing[@]}" >> "$LOG" 2>&1 || fail "pip install of .whl/ wheels failed (see $LOG)"
fi
export PYTHONPATH="$REPO/scripts/pyshim:$REPO:$DEPS${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1 TRITON_DEFAULT_FP_FUSION=1
kvbench() { "$PY" -c 'import sys; from kvbench.cli import main; sys.argv[0] = "kvbench"; main()' "$@"; }

# 3. The parts: name, time limit (s), command. Limits add up to 8.7 minutes.
names=(); codes=(); secs=()
step() {
    local name="$1" limit="$2"; shift 2
    log "$name (limit ${limit}s)"
    local start=$SECONDS
    timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.txt" 2>&1
    local rc=$?
    names+=("$name"); codes+=("$rc"); secs+=("$((SECONDS - start))")
    log "$name exit $rc"
}
export -f kvbench 2>/dev/null || true
export PY

step environment 20 bash -c 'set -e
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv || true
    "$PY" -c "import sys, torch, triton
print(\"python\", sys.version.split()[0], \"torch\", torch.__version__, \"cuda\", torch.version.cuda,
      \"triton\", triton.__version__, \"device\", torch.cuda.get_device_name(),
      \"capability\", torch.cuda.get_device_capability())"
    git rev-parse --short HEAD 2>/dev/null || true'
# Every kernel test on CUDA (they pick CUDA when it is there), not only the `gpu` ones.
step kernel-tests 170 "$PY" -m pytest -q -p no:cacheprovider tests/kernels -m "not aot" --device cuda \
    --junitxml="$OUT/kernel-tests.xml"
step benchmarks 130 "$PY" -m pytest -q -p no:cacheprovider tests/benchmarks/test_kernel_benchmarks.py \
    --benchmark-json="$OUT/benchmarks.json"
step strategy-run 120 bash -c 'kvbench run --strategy all --workload sharegpt --model llama-3-8b \
    --dtype bfloat16 --num-requests 64 --max-model-len 4096 --gpu-memory-utilization 0.9 \
    --out "$0/runs" --quiet' "$OUT"
# CUDA-graph decode (issue 17): tokens identical to eager, and eager vs graphs timed on one shape.
step cuda-graphs 50 bash -c '"$PY" -m pytest -q -p no:cacheprovider tests/execution/test_decode_graphs.py &&
    for mode in --enforce-eager --no-enforce-eager --enforce-eager --no-enforce-eager; do
        kvbench run --strategy paged --workload uniform --model llama-3-8b --dtype bfloat16 \
            --num-requests 32 --gpu-memory-utilization 0.9 $mode --out "$0/graphs" --json |
            "$PY" -c "import json,sys; s=json.load(sys.stdin); print(\"$mode\", \"TPOT p50 ms\", s[\"latency_ms\"][\"tpot\"][\"p50\"])"
    done' "$OUT"
step simulate 30 bash -c 'kvbench simulate --strategy paged --workload sharegpt --model llama-3-8b \
    --gpu h200 --num-requests 64 --max-model-len 4096 --out "$0/sim" --quiet' "$OUT"

# 4. One summary table; non-zero exit when any part failed.
status=0
for rc in "${codes[@]}"; do [ "$rc" = 0 ] || status=1; done
{
    printf '\n%-14s %-8s %5s %6s  %s\n' part result exit secs output
    for i in "${!names[@]}"; do
        rc="${codes[$i]}"
        if [ "$rc" = 0 ]; then result=ok; elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then result=TIMEOUT; else result=FAILED; fi
        printf '%-14s %-8s %5s %6s  %s\n' "${names[$i]}" "$result" "$rc" "${secs[$i]}" "$OUT/${names[$i]}.txt"
    done
    [ "$status" = 0 ] && echo "gpu_check: all parts passed" || echo "gpu_check: some parts FAILED"
} | tee -a "$LOG" > "$OUT/summary.txt"
cat "$OUT/summary.txt"
exit $status
