"""Simulator speed: the whole command `kvbench simulate --model llama-2-13b --gpu a100-40gb
--workload sharegpt --num-requests N --request-rate 2 --strategy paged`, as a user runs it:
a fresh process that imports kvbench, builds the workload, replays it, writes the results
folder and its HTML report.

The target (the performance contract): 10,000 requests in at most 2.5 s of CPU on the 2-core
development machine (results/reference/cpu-simulate-speed.md holds the measured figures).
That case is too long for every CI run: CI runs 2,000 requests against a limit that holds
today, and `KVBENCH_BENCH_REQUESTS=10000` runs the full case against the 2.5 s target.
The limit is checked on the command's CPU time (user + system, from the kernel's accounting
of the child process): the simulation is single-threaded, and CPU time does not count the
time other processes on a shared machine take from it (wall time does). `extra_info`
records wall and CPU time, steps and the simulated makespan.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

NUM_REQUESTS = int(os.environ.get("KVBENCH_BENCH_REQUESTS", "2000"))
# 2.5 s of CPU for 10,000 requests. The CI case runs fewer, emptier steps (its queue drains
# sooner) and pays the same start-up, and its limit leaves room for a shared machine's
# contention, which inflates even CPU time.
TARGET_S = 2.5 if NUM_REQUESTS >= 10_000 else 4.0 * NUM_REQUESTS / 2_000


def _simulate(out):
    command = [
        sys.executable, "-c", "from kvbench.cli.app import main; main()",
        "simulate", "--model", "llama-2-13b", "--gpu", "a100-40gb", "--workload", "sharegpt",
        "--num-requests", str(NUM_REQUESTS), "--request-rate", "2", "--strategy", "paged",
        "--out", str(out),
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def test_simulate_sharegpt_at_2_requests_per_second(benchmark, tmp_path):
    wall, cpu = benchmark.pedantic(_simulate, args=(tmp_path,), rounds=1, iterations=1)
    (folder,) = [path.parent for path in tmp_path.glob("*/kvbench_summary.json")]
    summary = json.loads((folder / "kvbench_summary.json").read_text())
    assert summary["completed"] == NUM_REQUESTS
    assert (folder / "report.html").is_file()
    steps = summary["scheduler"]["steps"]
    with (folder / "steps.csv").open() as rows:
        assert sum(1 for _ in rows) - 1 == steps  # every step's row reached steps.csv
    benchmark.extra_info.update(
        {
            "num_requests": NUM_REQUESTS,
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "steps": steps,
            "steps_per_cpu_s": round(steps / cpu, 1),
            "simulated_makespan_s": round(summary["duration_s"], 3),
            "simulated_output_tok_s": round(summary["throughput"]["output_tok_s"], 1),
            "target_cpu_s": TARGET_S,
        }
    )
    print(
        f"\n{NUM_REQUESTS} sharegpt requests: `kvbench simulate` took {wall:.2f} s wall, "
        f"{cpu:.2f} s CPU ({steps} steps); simulated makespan {summary['duration_s']:.1f} s"
    )
    assert cpu < TARGET_S, (
        f"{NUM_REQUESTS}-request `kvbench simulate` took {cpu:.1f} s of CPU "
        f"(target {TARGET_S} s)"
    )
