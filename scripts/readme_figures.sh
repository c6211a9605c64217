#!/usr/bin/env bash
# Regenerate every measured figure of docs/findings.md (the README quotes three of them), from
# the commands printed there. Runs are interleaved (repeat 1 of every command, then repeat 2,
# ...), so a slow spell on a shared machine spreads over all of them instead of sinking one;
# each figure is printed as the median with the range [min-max] over the repeats. The machine
# (CPU count, CPU model) and its load (uptime, before and after) are recorded with the figures.
#
#   scripts/readme_figures.sh              # 3 repeats, the documented request counts (~1 h)
#   scripts/readme_figures.sh --quick      # tiny request counts, 2 repeats (~6 min): a check
#   scripts/readme_figures.sh --repeats 5 --out /tmp/figures
#   scripts/readme_figures.sh --only moe-chat-16mib,dense-chat-16mib   # some figures (ids below)
#
# Output: OUT/figures.txt (what is printed), OUT/machine.txt, and every run's folder under
# OUT/<figure>/rep-<k>/. Run it on a quiet machine; docs/findings.md quotes what it prints.
set -euo pipefail

repeats=
quick=0
only=
out="results/readme-figures-$(date +%Y%m%d-%H%M%S)"
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=1; shift ;;
        --repeats) repeats="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --only) only=",$2,"; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "readme_figures.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
repeats=${repeats:-$([ "$quick" = 1 ] && echo 2 || echo 3)}
command -v kvbench >/dev/null || { echo "readme_figures.sh: kvbench is not on PATH" >&2; exit 2; }
mkdir -p "$out"

# id | command (as in docs/findings.md; --out and --quiet are added, --repeat is this script's).
# A command runs under vLLM's defaults (the commands' own) unless it says --defaults classic:
# the comparisons of classic batching policies do.
figures=(
  "memory-32mib|kvbench run --strategy contiguous,paged --workload sharegpt --kv-memory 32MiB --max-model-len 2048"
  "continuous-paged-8mib|kvbench run --workload sharegpt --strategy paged --batching continuous --kv-memory 8MiB --max-model-len 2048 --max-num-seqs 64 --defaults classic"
  "static-contiguous-8mib|kvbench run --workload sharegpt --strategy contiguous --reserve max --batching static --kv-memory 8MiB --max-model-len 2048 --max-num-seqs 64 --defaults classic"
  "policies-16mib|kvbench run --workload sharegpt --strategy paged,contiguous --batching continuous,static --kv-memory 16MiB --max-model-len 2048 --max-num-seqs 64 --defaults classic"
  "generate-1-thread|kvbench run --workload sharegpt --engine hf --max-model-len 2048 --max-num-seqs 64 --defaults classic"
  "generate-2-threads|kvbench run --workload sharegpt --engine hf --max-model-len 2048 --max-num-seqs 64 --cpu-threads 2 --defaults classic"
  "prefix-chat|kvbench run --strategy paged,prefix --workload chat --defaults classic"
  "parallel-sampling|kvbench run --strategy paged,prefix --workload parallel --num-requests 16 --defaults classic"
  "fp8-4mib|kvbench run --strategy paged,fp8 --dtype bfloat16 --workload sharegpt --kv-memory 4MiB --max-model-len 2048 --defaults classic"
  "moe-chat-16mib|kvbench run --model tiny-moe --strategy contiguous,paged,prefix,fp8 --workload chat --kv-memory 16MiB --defaults classic"
  "dense-chat-16mib|kvbench run --model tiny --strategy contiguous,paged,prefix,fp8 --workload chat --kv-memory 16MiB --defaults classic"
  "simulate-13b|kvbench simulate --model llama-2-13b --gpu a100-40gb --workload sharegpt --strategy contiguous,paged --num-requests 1000"
  "simulate-13b-rate-1|kvbench simulate --model llama-2-13b --gpu a100-40gb --workload sharegpt --strategy contiguous,paged --num-requests 1000 --request-rate 1"
  "simulate-13b-2048|kvbench simulate --model llama-2-13b --gpu a100-40gb --workload sharegpt --strategy contiguous,paged --num-requests 1000 --max-model-len 2048"
  "hybrid-cpu-summarize|kvbench run --model tiny-hybrid --strategy paged,hybrid --workload summarize --workload-param input_mean=2048 --num-requests 12 --kv-memory 16MiB --max-model-len 8192 --defaults classic"
  "hybrid-cpu-prefix|kvbench run --model tiny-hybrid --strategy paged,prefix,hybrid --workload prefix-repeat --workload-param prefix_len=2048 --num-requests 12 --kv-memory 16MiB --max-model-len 8192 --defaults classic"
  "simulate-gemma3-summarize|kvbench simulate --model gemma-3-27b --gpu h100-80gb --strategy paged,prefix,hybrid,hybrid-prefix --workload summarize --workload-param input_mean=8192 --workload-param output_mean=256 --num-requests 200 --request-rate 1 --max-model-len 32768"
  "simulate-gemma3-16k|kvbench simulate --model gemma-3-27b --gpu h100-80gb --strategy paged,hybrid --workload uniform --workload-param prompt_len=16384 --workload-param output_len=256 --num-requests 32"
  "simulate-gemma3-prefix|kvbench simulate --model gemma-3-27b --gpu h100-80gb --strategy paged,prefix,hybrid,hybrid-prefix --workload prefix-repeat --workload-param prefix_len=8192 --workload-param output_len=256,512 --num-requests 200 --request-rate 1 --max-model-len 32768"
)
sweep="kvbench sweep --simulate --model llama-2-13b --gpu a100-40gb --workload sharegpt --num-requests 300 --strategy contiguous,paged,prefix --reserve max,pow2,exact --request-rate 0.5,1,2,3,4,6 --slo ttft.p99=2s,tpot.p99=100ms --search request-rate --jobs 2 --name llama13b-a100-sharegpt --defaults classic"
quick_run=(--num-requests 8 --warmup 1)
quick_sweep=(--num-requests 12 --reserve max --request-rate 1,4 --search-range 0.5,4 --tolerance 0.5 --jobs 1)

load() { uptime | sed 's/.*load average/load average/'; }
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "nproc: $(nproc)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //' || uname -m)"
    echo "memory: $(grep -m1 MemTotal /proc/meminfo 2>/dev/null | awk '{printf "%.1f GiB", $2/1048576}')"
    echo "kvbench: $(kvbench --version 2>/dev/null | awk '{print $NF}'), git $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "python: $(python -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)')"
    echo "repeats: $repeats (interleaved)$([ "$quick" = 1 ] && echo ', QUICK: tiny request counts, figures not comparable')"
    echo "load before: $(load)"
} > "$out/machine.txt"
cat "$out/machine.txt"

# One folder per figure and repeat; the simulator is deterministic: one repeat is enough.
for ((k = 1; k <= repeats; k++)); do
    for entry in "${figures[@]}"; do
        id="${entry%%|*}"; cmd="${entry#*|}"
        [ -n "$only" ] && [[ "$only" != *",$id,"* ]] && continue
        case "$id" in simulate-*) [ "$k" -gt 1 ] && continue ;; esac
        extra=()
        [ "$quick" = 1 ] && extra=("${quick_run[@]}")
        echo "[$(date +%H:%M:%S)] repeat $k/$repeats: $id ($(load))" >&2
        # shellcheck disable=SC2086  # the command is meant to split into words
        folder=$($cmd "${extra[@]}" --out "$out/$id/rep-$k" --quiet)
        echo "$id $k $folder" >> "$out/runs.txt"
    done
done
if [ -z "$only" ] || [[ "$only" == *",sweep,"* ]]; then
    echo "[$(date +%H:%M:%S)] sweep ($(load))" >&2
    extra=()
    [ "$quick" = 1 ] && extra=("${quick_sweep[@]}")
    # shellcheck disable=SC2086
    $sweep "${extra[@]}" --out "$out/sweep" --quiet > /dev/null
fi
if [ -z "$only" ] || [[ "$only" == *",peer,"* ]]; then
    # The peer figure: kvbench against transformers' continuous batching, interleaved by the
    # script.
    echo "[$(date +%H:%M:%S)] peer: transformers continuous batching ($(load))" >&2
    peer=(--repeats "$repeats")
    [ "$quick" = 1 ] && peer=(--num-requests 8 --repeats "$repeats")
    python "$(dirname "$0")/peer_transformers_cb.py" "${peer[@]}" \
        > "$out/peer-transformers-cb.txt" 2> "$out/peer-transformers-cb.log"
fi
echo "load after: $(load)" >> "$out/machine.txt"

python - "$out" <<'PY' | tee "$out/figures.txt"
"""Medians and ranges over the repeats, per figure and strategy, and docs/findings.md's ratios."""
import json
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])
print((out / "machine.txt").read_text().rstrip())
print()

METRICS = [  # name, path in kvbench_summary.json, format
    ("out tok/s", ("throughput", "output_tok_s"), "{:,.1f}"),
    ("TTFT p50 ms", ("latency_ms", "ttft", "p50"), "{:,.0f}"),
    ("TPOT p50 ms", ("latency_ms", "tpot", "p50"), "{:,.2f}"),
    ("KV util %", ("memory", "utilization_mean"), "pct"),
    ("held/token", ("memory", "utilization_mean"), "inv"),
    ("batch mean", ("scheduler", "batch_size_mean"), "{:,.1f}"),
    ("batch max", ("scheduler", "batch_size_max"), "{:,.0f}"),
    ("preemptions", ("scheduler", "preemptions"), "{:,.0f}"),
    ("prefix hit %", ("scheduler", "prefix_hit_rate"), "pct"),
    ("prompt blocks max", ("memory", "prompt_blocks_max"), "{:,.0f}"),
    ("KV capacity tokens", ("memory", "kv_capacity_tokens"), "{:,.0f}"),
    ("KV held B/token", ("memory", "kv_held_bytes_per_token"), "{:,.0f}"),
]


def dig(data, path):
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def summaries(folder: Path) -> dict[str, dict]:
    if (folder / "comparison.json").is_file():
        data = json.loads((folder / "comparison.json").read_text())
        return {s["label"]: s for s in data["summaries"]}
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    return {summary["label"]: summary}


runs: dict[str, list[dict[str, dict]]] = {}
runs_file = out / "runs.txt"
for line in (runs_file.read_text().splitlines() if runs_file.exists() else []):
    figure, _rep, folder = line.split(" ", 2)
    runs.setdefault(figure, []).append(summaries(Path(folder)))


def fmt(value, how):
    if value is None:
        return "-"
    if how == "pct":
        return f"{value * 100:.1f}"
    return how.format(value)


def stat(values, how):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1 or min(values) == max(values):
        return fmt(med, how)
    return f"{fmt(med, how)} [{fmt(min(values), how)}-{fmt(max(values), how)}]"


for figure, reps in runs.items():
    print(f"== {figure} ({len(reps)} repeat{'s' if len(reps) > 1 else ''})")
    for label in reps[0]:
        cells = []
        for name, path, how in METRICS:
            values = [dig(rep.get(label), path) for rep in reps]
            if how == "inv":  # held bytes per token byte: 1 / utilization
                values, how = [1 / v if v else None for v in values], "{:.2f}x"
            if any(v is not None for v in values):
                cells.append(f"{name} {stat(values, how)}")
        print(f"  {label}: " + "; ".join(cells))


def ratio(name, a, b, metric=("throughput", "output_tok_s")):
    (fig_a, label_a), (fig_b, label_b) = a, b
    if fig_a not in runs or fig_b not in runs:
        return
    values = []
    for rep_a, rep_b in zip(runs[fig_a], runs[fig_b]):
        x, y = dig(rep_a.get(label_a), metric), dig(rep_b.get(label_b), metric)
        if x is not None and y:
            values.append(x / y)
    if values:
        print(f"  {name}: {stat(values, '{:.2f}x')}")


print("\n== ratios (per repeat, then median [range])")
ratio("paged / contiguous-max out tok/s, 32 MiB",
      ("memory-32mib", "paged"), ("memory-32mib", "contiguous-max"))
ratio("continuous+paged / static+contiguous-max, 8 MiB",
      ("continuous-paged-8mib", "paged"), ("static-contiguous-8mib", "contiguous-max-static"))
ratio("continuous+paged / static+contiguous-max, 16 MiB",
      ("policies-16mib", "paged"), ("policies-16mib", "contiguous-max-static"))
ratio("continuous+paged (16 MiB) / generate() 1 thread",
      ("policies-16mib", "paged"), ("generate-1-thread", "hf-generate"))
ratio("continuous+paged (16 MiB) / generate() 2 threads",
      ("policies-16mib", "paged"), ("generate-2-threads", "hf-generate"))
ratio("generate() 2 threads / 1 thread",
      ("generate-2-threads", "hf-generate"), ("generate-1-thread", "hf-generate"))
ratio("simulated paged / contiguous-max out tok/s",
      ("simulate-13b", "paged-vllm-v1"), ("simulate-13b", "contiguous-max-vllm-v1"))
ratio("gemma-3-27b 16k prompts: hybrid / paged KV capacity",
      ("simulate-gemma3-16k", "hybrid-vllm-v1"), ("simulate-gemma3-16k", "paged-vllm-v1"),
      ("memory", "kv_capacity_tokens"))
for model, figure in (("tiny-moe", "moe-chat-16mib"), ("tiny", "dense-chat-16mib")):
    for label, base in (("paged", "contiguous-max"), ("prefix", "paged"), ("fp8", "paged")):
        ratio(f"{model}, chat 16 MiB: {label} / {base} out tok/s",
              (figure, label), (figure, base))
for label in ("contiguous-max", "paged", "prefix", "fp8"):
    ratio(f"chat 16 MiB, {label}: tiny-moe / tiny out tok/s",
          ("moe-chat-16mib", label), ("dense-chat-16mib", label))

peer = out / "peer-transformers-cb.txt"
if peer.is_file():
    print("\n== kvbench vs transformers continuous batching (scripts/peer_transformers_cb.py)")
    for line in peer.read_text().splitlines():
        print(f"  {line}")

capacity = next((out / "sweep").glob("*/capacity.csv"), None)
if capacity is not None:
    import pandas as pd

    frame = pd.read_csv(capacity)
    print("\n== SLO capacity (sweep)")
    for _, row in frame.iterrows():
        if pd.isna(row["lo"]):
            print(f"  {row['label']}: misses the SLO at the bottom of the search range")
            continue
        print(f"  {row['label']}: {row['lo']:.3g} req/s, "
              f"{row.get('output_tok_s_at_capacity', float('nan')):.0f} out tok/s there")
PY
