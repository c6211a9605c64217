"""Simulator speed at production-trace scale: a BurstGPT-shaped trace (`burstgpt_shaped.py`:
BurstGPT's CSV format, arrival burstiness and long-tailed lengths, seeded) replayed by the
whole command `kvbench simulate --model llama-3-8b --gpu h100-80gb --workload TRACE.csv
--time-scale S --strategy paged` in a fresh process, as a capacity planner runs it.

The target (the performance contract): 1,000,000 requests in at most 150 s of CPU and 3 GB
of peak memory. It is behind `KVBENCH_BENCH_BURSTGPT_REQUESTS` (the number of trace rows;
the test is skipped without it): far too slow for CI. results/reference/cpu-simulate-speed.md
and docs/simulator.md, Speed and output files, give the measured figures. The CPU time is the child's user + system time (`RUSAGE_CHILDREN`), its
peak memory `ru_maxrss`; both go into `extra_info` with the steps and the simulated
makespan. The limit is checked from a million rows on (scaled to the rows); a smaller N, a
quicker look at the scaling, only records its figures (start-up and the results' fixed
costs would dominate a scaled limit).

`--time-scale` compresses the trace's two months (0.27 requests/s on average) to about
`REPLAY_RATE_PER_S` requests/s, a load one H100 serving Llama-3-8B keeps up with at a few
dozen sequences per step: a replay at the trace's own rate would mostly run one sequence
at a time.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time

import pytest

from tests.benchmarks.burstgpt_shaped import MEAN_RATE_PER_S, write_burstgpt_shaped_csv

NUM_ROWS = int(os.environ.get("KVBENCH_BENCH_BURSTGPT_REQUESTS", "0"))
TARGET_S_PER_MILLION = 150.0
MAX_RSS_BYTES = 3_000_000_000
REPLAY_RATE_PER_S = 10.0

pytestmark = pytest.mark.skipif(
    NUM_ROWS <= 0, reason="set KVBENCH_BENCH_BURSTGPT_REQUESTS=1000000 to run (minutes)")


def _simulate(trace, out):
    command = [
        sys.executable, "-c", "from kvbench.cli.app import main; main()",
        "simulate", "--model", "llama-3-8b", "--gpu", "h100-80gb", "--workload", str(trace),
        "--time-scale", repr(MEAN_RATE_PER_S / REPLAY_RATE_PER_S), "--strategy", "paged",
        "--quiet", "--out", str(out),
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss * 1024  # ru_maxrss: KiB on Linux


def test_simulate_a_burstgpt_shaped_trace(benchmark, tmp_path):
    trace = write_burstgpt_shaped_csv(tmp_path / "burstgpt_shaped.csv", NUM_ROWS, seed=0)
    wall, cpu, max_rss_bytes = benchmark.pedantic(_simulate, args=(trace, tmp_path / "out"),
                                                  rounds=1, iterations=1)
    (folder,) = [path.parent for path in (tmp_path / "out").glob("*/kvbench_summary.json")]
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    assert summary["completed"] == summary["num_requests"] > 0.9 * NUM_ROWS
    target_s = TARGET_S_PER_MILLION * NUM_ROWS / 1e6
    benchmark.extra_info.update({
        "trace_rows": NUM_ROWS,
        "requests": summary["num_requests"],
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "max_rss_bytes": max_rss_bytes,
        "steps": summary["scheduler"]["steps"],
        "simulated_makespan_s": round(summary["duration_s"], 3),
        "batch_size_mean": summary["scheduler"]["batch_size_mean"],
        "target_cpu_s": target_s,
    })
    print(f"\n{summary['num_requests']} BurstGPT-shaped requests: {cpu:.1f} s CPU, "
          f"{wall:.1f} s wall, {max_rss_bytes / 2**20:.0f} MiB peak, "
          f"{summary['scheduler']['steps']} steps")
    # A million requests' results are 5 GB, and pytest keeps its last three temporary
    # folders: left there, they fill the disk and crowd the next run's page cache.
    shutil.rmtree(tmp_path / "out")
    if NUM_ROWS >= 1_000_000:
        assert cpu < target_s, f"{cpu:.1f} s of CPU (target {target_s:.1f} s)"
        assert max_rss_bytes <= MAX_RSS_BYTES, f"{max_rss_bytes / 1e9:.2f} GB at peak"
