"""The figures the golden test pins: tokens, `kvbench run` books and `kvbench simulate` summaries.

`python -m tests.golden.golden_cases` rewrites `golden.json` from the current code; do that
only for a change that is meant to move these figures, and say why in the commit.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import tempfile
from pathlib import Path
from typing import Any

GOLDEN_FILE = Path(__file__).with_name("golden.json")

# Wall-clock figures differ from machine to machine; everything else in a CPU run is fixed by
# the seed, the scheduler and the allocators.
WALL_CLOCK_KEYS = {"duration_s", "throughput", "latency_ms", "device"}
WALL_CLOCK_SCHEDULER_KEYS = {"overhead_ms_total", "overhead_fraction",
                             # a prefix cache's residency times (the reuse distances are not)
                             *(f"{tier}_block_{what}_ms" for tier in ("kv", "host")
                               for what in ("lifetime", "idle_before_evict", "reuse_gap")),
                             "kv_residency_cdf_ms"}
# Memory means are weighted by step duration, so on the wall clock they vary too.
WALL_CLOCK_MEMORY_KEYS = {"breakdown_mean", "utilization_mean", "utilization_saturated",
                          "kv_held_bytes_per_token", "kv_groups"}

# Pinned under kvbench's classic defaults, stated, so that the figures stay those pinned when
# the commands' defaults move (the default, vLLM's, is pinned by the vllm-v1 tests).
CLASSIC = ["--defaults", "classic"]
RUN_CASES: dict[str, list[str]] = {
    "run-chat-all": ["run", "--strategy", "all", "--workload", "chat", "--num-requests", "12",
                     "--kv-memory", "4MiB", *CLASSIC],
    "run-prefix-repeat": ["run", "--strategy", "prefix", "--workload", "prefix-repeat",
                          "--num-requests", "8", *CLASSIC],
    "run-static-sharegpt": ["run", "--strategy", "paged,contiguous", "--batching", "static",
                            "--workload", "sharegpt", "--num-requests", "10",
                            "--kv-memory", "8MiB", *CLASSIC],
}
SIMULATE_CASES: dict[str, list[str]] = {
    "simulate-sharegpt-all": ["simulate", "--strategy", "all", "--model", "llama-2-7b",
                              "--gpu", "a100-40gb", "--workload", "sharegpt",
                              "--num-requests", "200", "--request-rate", "4", *CLASSIC],
    "simulate-chat-static": ["simulate", "--strategy", "paged", "--batching", "static",
                             "--model", "llama-3-8b", "--gpu", "a100-40gb", "--workload", "chat",
                             "--num-requests", "100", *CLASSIC],
}
TOKEN_STRATEGIES = ["contiguous", "paged", "hybrid", "prefix", "fp8"]


def machine_independent(summary: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in summary.items() if k not in WALL_CLOCK_KEYS}
    kept["scheduler"] = {k: v for k, v in summary["scheduler"].items()
                         if k not in WALL_CLOCK_SCHEDULER_KEYS}
    kept["memory"] = {k: v for k, v in summary["memory"].items()
                      if k not in WALL_CLOCK_MEMORY_KEYS}
    return kept


def _summaries(args: list[str]) -> dict[str, Any]:
    from kvbench.cli import main

    with tempfile.TemporaryDirectory() as out, contextlib.redirect_stdout(io.StringIO()):
        code = main([*args, "--quiet", "--out", out])
        if code != 0:
            raise RuntimeError(f"kvbench {' '.join(args)} exited {code}")
        found = {}
        for path in sorted(Path(out).rglob("kvbench_summary.json")):
            summary = json.loads(path.read_text())
            found[summary["label"]] = summary
        return found


def collect_tokens() -> dict[str, list[list[int]]]:
    from kvbench import generate

    rng = random.Random(7)
    prompts = [[rng.randrange(512) for _ in range(rng.randint(4, 48))] for _ in range(6)]
    tokens = {}
    for strategy in TOKEN_STRATEGIES:
        for batching in ("continuous", "static"):
            tokens[f"{strategy}-{batching}"] = generate(
                prompts, 12, strategy=strategy, batching=batching, kv_memory="16MiB")
    return tokens


def collect_runs() -> dict[str, Any]:
    return {name: {label: machine_independent(s) for label, s in _summaries(args).items()}
            for name, args in RUN_CASES.items()}


def collect_simulations() -> dict[str, Any]:
    return {name: _summaries(args) for name, args in SIMULATE_CASES.items()}


def collect() -> dict[str, Any]:
    return {"tokens": collect_tokens(), "runs": collect_runs(),
            "simulations": collect_simulations()}


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    GOLDEN_FILE.write_text(json.dumps(collect(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN_FILE}")
