"""Simulator speed: `kvbench simulate --model llama-2-13b --gpu a100-40gb --workload sharegpt
--num-requests N --request-rate 2 --strategy paged`, run through the library's runner (files
written, summary computed), as the command runs it.

Issue 15 asks for 10,000 requests in at most 10 s of CPU on the 2-core development machine.
That case takes about 10 s, too long for every CI run: CI runs 2,000 requests, and
`KVBENCH_BENCH_REQUESTS=10000` runs the full case (docs/simulator.md records its figure).
The limit is checked on the process's CPU time: the simulation is single-threaded, and CPU
time does not count the time other processes on a shared machine take from it (wall time
does). `extra_info` records wall and CPU time, steps and the simulated makespan.
"""

from __future__ import annotations

import os
import time
import warnings

from kvbench.bench.run_config import RunConfig
from kvbench.bench.runner import prepare, run_one
from kvbench.config import EngineConfig
from kvbench.workloads import ClippedRequestsWarning

NUM_REQUESTS = int(os.environ.get("KVBENCH_BENCH_REQUESTS", "2000"))
# 10 s of CPU for 10,000 requests (issue 15). The CI case runs fewer, emptier steps (its queue
# drains sooner); its limit is 1.5x its figure on the development machine (2.0 s).
TARGET_S = 10.0 if NUM_REQUESTS >= 10_000 else 3.0 * NUM_REQUESTS / 2_000


def _simulate(folder):
    run = RunConfig(
        engine=EngineConfig(model="llama-2-13b", strategy="paged", batching="continuous",
                            dtype="bfloat16"),
        workload="sharegpt", num_requests=NUM_REQUESTS, request_rate=2.0,
        engine_kind="simulated", gpu="a100-40gb",
    )
    t0, cpu0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClippedRequestsWarning)
        prepared = prepare(run)
    outcome = run_one(run, folder, show_progress=False, prepared=prepared)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return outcome, wall, cpu


def test_simulate_sharegpt_at_2_requests_per_second(benchmark, tmp_path):
    outcome, wall, cpu = benchmark.pedantic(_simulate, args=(tmp_path / "run",), rounds=1,
                                            iterations=1)
    summary = outcome.summary
    assert summary["completed"] == NUM_REQUESTS
    steps = summary["scheduler"]["steps"]
    assert len(outcome.steps) == steps  # every step's row reached steps.csv
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
        f"\n{NUM_REQUESTS} sharegpt requests simulated in {wall:.2f} s wall, {cpu:.2f} s CPU "
        f"({steps} steps); simulated makespan {summary['duration_s']:.1f} s"
    )
    assert cpu < TARGET_S, (
        f"{NUM_REQUESTS}-request simulation took {cpu:.1f} s of CPU (target {TARGET_S} s)"
    )
