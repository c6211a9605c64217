"""The engine's host path per decode step, strategy by strategy (CPU; the host work is the
same on a GPU).

Each case fills the engine with `running` sequences of about `context` tokens, then times
whole decode steps of the real engine (schedule, allocate, layout, step inputs, sample,
commit, memory split) with an executor that builds every device input (one staging buffer,
block tables or start slots, slot mapping) but computes nothing. `extra_info` records the
median host time per step (`host_us_median`); `python -m tests.benchmarks.test_host_path`
prints the table and the spread across strategies. The goal is about a millisecond per step
at 256 x 2,048 for every strategy, within 0.2 ms of each other: a bias here would add to
one strategy's every token on a GPU.
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch

from kvbench.core.request import Request
from kvbench.core.step_batch import StepBatch
from kvbench.engine.engine import Engine
from kvbench.execution.step_inputs import StepInputs
from kvbench.execution.tensor_executor import TensorExecutor
from kvbench.scheduling import SchedulerLimits, make_policy
from kvbench.strategies import make_strategy

STRATEGIES = ("contiguous", "paged", "prefix", "fp8")
SHAPES = ((64, 512), (64, 2048), (256, 512), (256, 2048))
VOCAB = 64  # logits are zeros: sampling cost stays the same small amount for every strategy
STEPS = 40  # timed decode steps per case
WARMUP_STEPS = 5


class HostPathExecutor(TensorExecutor):
    """Builds a step's device inputs as `ModelExecutor` does, and computes nothing."""

    def __init__(self) -> None:
        self.inputs = StepInputs(torch.device("cpu"))

    def execute(self, batch: StepBatch) -> torch.Tensor:
        self.inputs.build(batch)
        return torch.zeros(len(batch.sample_rows), VOCAB)


def host_path_engine(strategy: str, running: int, context: int) -> Engine:
    """An engine with `running` sequences decoding at `context` tokens of KV each."""
    torch.set_num_threads(1)
    max_model_len = context + WARMUP_STEPS + STEPS + 32
    cache = make_strategy(strategy, running * max_model_len, max_model_len)
    limits = SchedulerLimits(max_num_seqs=running, max_num_batched_tokens=64 * 1024)
    engine = Engine(cache, make_policy("continuous", cache, limits), HostPathExecutor(),
                    bytes_per_slot=1, max_model_len=max_model_len)
    prompt_len = context - 1
    for i in range(running):  # distinct prompts: no prefix is shared
        prompt = tuple((i * 7919 + j * 31) % 30000 for j in range(prompt_len))
        engine.add_request(Request(i, 0.0, prompt, WARMUP_STEPS + STEPS + 16))
    while engine.waiting or engine.steps[-1].num_prefill_seqs:
        engine.step()
    return engine


def time_decode_steps(engine: Engine, steps: int) -> list[float]:
    """Wall time of each of `steps` decode steps, in microseconds."""
    times_us = []
    for _ in range(steps):
        t0 = time.perf_counter()
        engine.step()
        times_us.append((time.perf_counter() - t0) * 1e6)
    return times_us


@pytest.mark.parametrize("running,context", SHAPES, ids=[f"{r}x{c}" for r, c in SHAPES])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_host_path(benchmark, strategy, running, context):
    engine = host_path_engine(strategy, running, context)
    time_decode_steps(engine, WARMUP_STEPS)
    first = len(engine.steps)
    times_us: list[float] = []
    benchmark.pedantic(lambda: times_us.extend(time_decode_steps(engine, STEPS)),
                       rounds=1, iterations=1)
    timed = engine.steps[first:]
    assert all(r.num_decode_seqs == running and not r.num_prefill_seqs for r in timed)
    assert all(r.kv_token_bytes >= running * context for r in timed)
    benchmark.extra_info.update({
        "strategy": strategy,
        "running": running,
        "context": context,
        "host_us_median": statistics.median(times_us),
        # every 16th step all sequences cross a block boundary together (equal lengths): the
        # mean shows those steps (new blocks, prefix hashes), the median the typical step
        "host_us_mean": statistics.fmean(times_us),
    })


def main() -> None:
    """Print the median host time per step and the spread across strategies per shape."""
    for running, context in SHAPES:
        medians = {}
        for strategy in STRATEGIES:
            engine = host_path_engine(strategy, running, context)
            time_decode_steps(engine, WARMUP_STEPS)
            medians[strategy] = statistics.median(time_decode_steps(engine, STEPS))
        spread = max(medians.values()) - min(medians.values())
        cells = "  ".join(f"{s} {us:7.0f}" for s, us in medians.items())
        print(f"{running:4d} x {context:5d}: {cells}  (us; spread {spread:.0f})")


if __name__ == "__main__":
    main()
