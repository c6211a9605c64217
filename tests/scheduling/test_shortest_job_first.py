"""`--queue-order sjf` on a crafted workload: short jobs are admitted first and the mean TTFT
drops, under continuous and static batching alike.

The simulated executor runs the real scheduler and allocator on a modelled clock, so the
times compared are deterministic.
"""

from __future__ import annotations

from statistics import mean

import pytest

from kvbench.build.engines import build_engine
from kvbench.build.simulated_executors import SimulatedExecutors
from kvbench.config import EngineConfig
from tests.scheduling.helpers import prompt_of, request


def _run(batching: str, queue_order: str):
    config = EngineConfig(model="llama-2-7b", dtype="bfloat16", strategy="paged",
                          batching=batching, queue_order=queue_order, max_num_seqs=1,
                          max_model_len=2048)
    engine = build_engine(config, executor=SimulatedExecutors("a100-80gb")).engine
    # one long job ahead of four short ones, all queued at once: with one place, order is all
    jobs = [(1500, 400), (40, 8), (20, 16), (60, 4), (30, 8)]
    for i, (prompt_len, output_len) in enumerate(jobs):
        engine.add_request(request(i, prompt_of(i, prompt_len, vocab=32000), output_len,
                                   arrival_s=i * 1e-6))
    engine.run_to_completion()
    seqs = [engine.sequences[i][0] for i in range(len(jobs))]
    admitted = [s.request.request_id for s in sorted(seqs, key=lambda s: s.admitted_s)]
    ttft_s = [s.first_token_s - s.request.arrival_s for s in seqs]
    return admitted, ttft_s, seqs


@pytest.mark.parametrize("batching", ["continuous", "static"])
def test_sjf_admits_short_jobs_first_and_lowers_mean_ttft(batching):
    fcfs_order, fcfs_ttft, _ = _run(batching, "fcfs")
    sjf_order, sjf_ttft, seqs = _run(batching, "sjf")
    assert fcfs_order == [0, 1, 2, 3, 4]
    assert sjf_order == [2, 4, 1, 3, 0], "by prompt + output tokens: 36, 38, 48, 64, 1900"
    assert all(len(s.token_ids) - s.prompt_len == s.request.output_len for s in seqs)
    assert mean(sjf_ttft) < 0.5 * mean(fcfs_ttft)
