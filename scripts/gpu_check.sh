#!/usr/bin/env bash
# The one call to make on a lent GPU box (bare and offline is fine): at most 5 minutes, the
# most valuable parts first, each under its own time limit, each part's output written as it
# finishes, everything in at most 8 files directly in OUT:
#
#   summary.txt        one line per part: result, exit, seconds, limit (rewritten after each)
#   log.txt            every part's output, appended as it runs
#   environment.txt    GPU, driver, Python, torch, Triton, the commit
#   kernel-tests.xml   GPU-sized kernel tests, graph tokens against eager, weights (JUnit)
#   probe.json         one llama-3-8b load shared by: eager against graph decode (tokens
#                      equal), Triton compiles and graph captures inside measured steps, arena
#                      retention, the KV budget and its memory profile (scripts/gpu_probe.py)
#   benchmarks.json    the kernel benchmark baseline (pytest-benchmark)
#   comparison.tar.gz  paged against contiguous on llama-3-8b: kvbench's results folder
#
# Exit 0 when every part passed, 1 when one failed or ran out of time, 2 when there is no
# CUDA device (checked first: nothing is written).
#
#   scripts/gpu_wheels.sh                                   # before, with network (.whl/)
#   scripts/gpu_check.sh results/reference/<date>-<gpu>     # on the GPU box
#   scripts/gpu_check.sh --dry-run OUT                      # anywhere: CUDA-only parts stubbed
#
# Needs on the box: Python >= 3.11 with CUDA builds of torch and Triton, numpy, pandas,
# pytest, pytest-benchmark, safetensors; the five wheels a bare box lacks (plotly, narwhals,
# nvtx, pytz, tzdata) come from .whl/ into .whl/site, never into its site-packages. kvbench
# runs from this checkout without being installed (scripts/pyshim).
set -uo pipefail
DRY_RUN=0
if [ "${1:-}" = "--dry-run" ]; then DRY_RUN=1; shift; fi
OUT="${1:?usage: scripts/gpu_check.sh [--dry-run] OUTPUT_FOLDER}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    if command -v python3 >/dev/null 2>&1; then PY=python3; else PY=python; fi
fi
fail() { echo "gpu_check: error: $*" >&2; exit 2; }
command -v "$PY" >/dev/null 2>&1 || fail "no python3 or python on PATH (set PYTHON=...)"
TOTAL_S=300  # the whole check; each part's limit is cut to what is left of it

# 1. CUDA first: on a machine without it, stop at once (a dry run goes on, on the CPU).
if [ "$DRY_RUN" = 0 ]; then
    cuda_msg="$("$PY" -c 'import torch
if not torch.cuda.is_available():
    raise SystemExit("torch %s sees no CUDA device (torch.cuda.is_available() is False)" % torch.__version__)
print(torch.cuda.get_device_name())' 2>&1)" \
        || fail "${cuda_msg##*$'\n'}; run this on a machine with an NVIDIA GPU and a CUDA build of torch (or pass --dry-run)"
fi

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/log.txt"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
: > "$LOG"
log() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$LOG"; }
[ "$DRY_RUN" = 1 ] && log "dry run: no CUDA needed; CUDA-only parts are stubbed and say so"

# 2. The wheels a bare box lacks, from .whl/ into .whl/site (module:wheel prefix).
DEPS="$REPO/.whl/site"
NEEDED="plotly:plotly narwhals:narwhals nvtx:nvtx pytz:pytz tzdata:tzdata"
missing=()
for pair in $NEEDED; do
    module="${pair%%:*}"; wheel="${pair##*:}"
    PYTHONPATH="$DEPS" "$PY" -c "import $module" >/dev/null 2>&1 && continue
    found=$(ls "$REPO"/.whl/"$wheel"-*.whl 2>/dev/null | head -1)
    if [ -z "$found" ] && [ "$DRY_RUN" = 1 ]; then
        log "dry run: python module '$module' is missing here and .whl/ has no $wheel wheel"
        continue
    fi
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
export PY OUT WORK DRY_RUN

kvbench() { "$PY" -c 'import sys; from kvbench.cli import main; sys.argv[0] = "kvbench"; main()' "$@"; }
stub() { echo "dry run: $1 needs CUDA: not run"; }

# 3. The parts, most valuable first. Each runs in `bash -c` under `set -euo pipefail`.
part_environment() {
    {
        nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv \
            || echo "nvidia-smi: not available"
        "$PY" -c 'import sys, torch, triton
cuda = torch.cuda.is_available()
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "triton", triton.__version__)
print("device", torch.cuda.get_device_name() if cuda else "none (CPU)",
      "capability", torch.cuda.get_device_capability() if cuda else None)'
        git rev-parse --short HEAD 2>/dev/null || echo "commit: not a git checkout"
    } | tee "$OUT/environment.txt"
}
part_kernel_tests() {
    if [ "$DRY_RUN" = 1 ]; then stub "GPU-sized kernel tests"; return 0; fi
    "$PY" -m pytest -q -p no:cacheprovider --device cuda --junitxml="$OUT/kernel-tests.xml" \
        tests/kernels/test_triton_kernels.py::test_gpu_model_sized \
        tests/execution/test_decode_graphs.py tests/models/test_dummy_weights.py
}
part_probe() {
    if [ "$DRY_RUN" = 1 ]; then
        "$PY" scripts/gpu_probe.py --out "$OUT/probe.json" --model tiny --device cpu \
            --dtype float32 --num-requests 4 --prompt-len 16 --output-len 8 --max-model-len 256
    else
        "$PY" scripts/gpu_probe.py --out "$OUT/probe.json"
    fi
}
part_benchmarks() {
    if [ "$DRY_RUN" = 1 ]; then stub "the kernel benchmark baseline"; return 0; fi
    "$PY" -m pytest -q -p no:cacheprovider tests/benchmarks/test_kernel_benchmarks.py \
        --benchmark-json="$OUT/benchmarks.json"
}
part_comparison() {
    local size=(--model llama-3-8b --dtype bfloat16 --num-requests 48 --max-model-len 4096)
    [ "$DRY_RUN" = 1 ] && size=(--model tiny --device cpu --num-requests 2 --max-model-len 128)
    kvbench run --strategy paged,contiguous --workload sharegpt "${size[@]}" \
        --out "$WORK/runs" --quiet
}
export -f kvbench stub part_environment part_kernel_tests part_probe part_benchmarks \
    part_comparison

names=(); codes=(); secs=(); caps=()
write_summary() {
    local status=0 i rc result
    {
        printf '%-12s %-8s %5s %5s %5s\n' part result exit secs limit
        for i in "${!names[@]}"; do
            rc="${codes[$i]}"
            if [ "$rc" = 0 ]; then result=ok; elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then result=TIMEOUT
            elif [ "$rc" = skip ]; then result=NO-TIME; else result=FAILED; fi
            [ "$rc" = 0 ] || status=1
            printf '%-12s %-8s %5s %5s %5s\n' "${names[$i]}" "$result" "$rc" "${secs[$i]}" "${caps[$i]}"
        done
        [ "$DRY_RUN" = 1 ] && echo "dry run: CUDA-only parts stubbed (they say so in log.txt)"
        [ "$status" = 0 ] && echo "gpu_check: all parts passed" || echo "gpu_check: some parts FAILED"
    } > "$OUT/summary.txt"
    return $status
}
part() {
    local name="$1" limit="$2" left=$((TOTAL_S - SECONDS)) start=$SECONDS rc
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 5 ]; then
        log "$name: no time left of the ${TOTAL_S}s"; rc=skip; limit=0
    else
        log "$name (limit ${limit}s)"
        timeout --kill-after=5 "$limit" bash -c "set -euo pipefail; part_${name//-/_}" >> "$LOG" 2>&1
        rc=$?
        log "$name exit $rc after $((SECONDS - start))s"
    fi
    names+=("$name"); codes+=("$rc"); secs+=("$((SECONDS - start))"); caps+=("$limit")
    write_summary
}

# Limits add up to 290 s of the 300.
part environment 15
part kernel-tests 70
part probe 100
part benchmarks 45
part comparison 60
# The comparison is packed whole or not: a run stopped by its limit leaves a .partial folder,
# packed all the same (its summary, where written, says what stopped it).
if [ -d "$WORK/runs" ]; then tar -czf "$OUT/comparison.tar.gz" -C "$WORK" runs; fi

write_summary
status=$?
cat "$OUT/summary.txt" | tee -a "$LOG"
exit $status
