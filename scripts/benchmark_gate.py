"""The GPU benchmark gate: this run's pytest-benchmark JSON against a baseline recorded on the
same GPU model.

    python scripts/benchmark_gate.py benchmarks.json \
        --baseline-dir results/reference/benchmarks [--artifact last-main/benchmarks.json] \
        [--max-slowdown 10] [--stat min] [--record-if-missing]

The baseline is the committed `results/reference/benchmarks/<gpu>.json` for this run's GPU
(reviewed, kept on purpose) or else `--artifact`, the last main run's `benchmarks.json`. Each
file names its GPU in `machine_info.gpu` (tests/benchmarks/conftest.py records it): a
baseline from another GPU model is refused, as a benchmark of one model says nothing of
another's speed. Every benchmark must be in both files: a name in one only fails the gate
(renamed or new benchmarks need a new baseline) instead of passing unchecked. A benchmark
fails when its `--stat` (the minimum over rounds by default: the statistic least moved by
other work on the machine) is more than `--max-slowdown` percent above the baseline's.

Without any baseline the gate fails, unless `--record-if-missing` (a run on main, whose own
`benchmarks.json` becomes the next baseline). Exit 0: the gate holds; 1: it fails; 2: bad
input. Standard library only: it runs before or without kvbench's environment.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any


def gpu_file_name(gpu: str) -> str:
    """`NVIDIA H100 80GB HBM3` -> `nvidia-h100-80gb-hbm3.json`."""
    return re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") + ".json"


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise SystemExit(_bad(f"cannot read {path}: {err}")) from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise SystemExit(_bad(f"{path} is not a pytest-benchmark JSON (no benchmarks list)"))
    return data


def _bad(message: str) -> int:
    print(f"benchmark_gate: error: {message}", file=sys.stderr)
    return 2


def gpu_of(data: dict[str, Any]) -> str | None:
    gpu = (data.get("machine_info") or {}).get("gpu")
    return gpu if isinstance(gpu, str) and gpu else None


def stats_by_name(data: dict[str, Any], stat: str) -> dict[str, float]:
    return {b["fullname"]: float(b["stats"][stat]) for b in data["benchmarks"]}


def compare(current: dict[str, Any], baseline: dict[str, Any], stat: str,
            max_slowdown_pct: float) -> list[str]:
    """Why the gate fails (empty: it holds), after printing one line per benchmark."""
    now, then = stats_by_name(current, stat), stats_by_name(baseline, stat)
    problems = [f"{name}: in the baseline, not in this run" for name in sorted(then.keys() - now.keys())]
    problems += [f"{name}: in this run, not in the baseline (record a new baseline)"
                 for name in sorted(now.keys() - then.keys())]
    for name in sorted(now.keys() & then.keys()):
        change = now[name] / then[name] - 1 if then[name] > 0 else 0.0
        slow = change * 100 > max_slowdown_pct
        print(f"{'FAIL' if slow else 'ok  '} {name}: {stat} {then[name] * 1e6:.1f} us -> "
              f"{now[name] * 1e6:.1f} us ({change:+.1%})")
        if slow:
            problems.append(f"{name}: {stat} {change:+.1%}, more than +{max_slowdown_pct:g}%")
    return problems


def choose_baseline(gpu: str, baseline_dir: Path, artifact: Path | None) -> Path | None:
    committed = baseline_dir / gpu_file_name(gpu)
    if committed.is_file():
        return committed
    if artifact is not None and artifact.is_file():
        return artifact
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("current", type=Path, help="this run's --benchmark-json file")
    parser.add_argument("--baseline-dir", type=Path, required=True,
                        help="committed baselines, one <gpu>.json per GPU model")
    parser.add_argument("--artifact", type=Path, default=None,
                        help="the last main run's benchmarks.json (used without a committed one)")
    parser.add_argument("--stat", default="min", choices=["min", "median", "mean"])
    parser.add_argument("--max-slowdown", type=float, default=10.0, metavar="PERCENT")
    parser.add_argument("--record-if-missing", action="store_true",
                        help="pass when no baseline exists for this GPU (a main run records it)")
    args = parser.parse_args(argv)
    current = _load(args.current)
    gpu = gpu_of(current)
    if gpu is None:
        return _bad(f"{args.current} names no GPU (machine_info.gpu): run the benchmarks "
                    "with tests/benchmarks/conftest.py on a CUDA machine")
    path = choose_baseline(gpu, args.baseline_dir, args.artifact)
    if path is None:
        where = f"{args.baseline_dir / gpu_file_name(gpu)} or --artifact"
        if args.record_if_missing:
            print(f"no baseline for {gpu} ({where}): this run's results become it")
            return 0
        print(f"benchmark_gate: FAIL: no baseline for {gpu} ({where}); commit this run's "
              f"benchmarks.json as {args.baseline_dir / gpu_file_name(gpu)}", file=sys.stderr)
        return 1
    baseline = _load(path)
    if gpu_of(baseline) != gpu:
        print(f"benchmark_gate: FAIL: baseline {path} was recorded on {gpu_of(baseline)}, "
              f"this run on {gpu}", file=sys.stderr)
        return 1
    print(f"baseline: {path} ({gpu})")
    problems = compare(current, baseline, args.stat, args.max_slowdown)
    for problem in problems:
        print(f"benchmark_gate: FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
