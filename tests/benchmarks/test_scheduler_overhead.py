"""Scheduler + allocator overhead at 256 running sequences (tiny model, CPU, paged, continuous).

`overhead_ms` of a step (steps.csv) is the time in the step outside the model forward:
scheduling, block allocation, the layout (block tables, slot mapping), sampling and commit,
the memory split. The case times decode steps with all 256 sequences running and records
overhead fraction = sum(overhead_ms) / sum(step_ms) over those steps in `extra_info`; it must
stay below 10%. Always on the CPU: on a GPU the tiny model's forward is launch-bound and
the fraction says little about the scheduler.
"""

from __future__ import annotations

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.request import Request

RUNNING = 256
PROMPT_LEN = 16
DECODE_STEPS = 8  # per round
ROUNDS = 3
MAX_OVERHEAD_FRACTION = 0.10


def test_scheduler_overhead_at_256_running_sequences(benchmark):
    output_len = 2 + DECODE_STEPS * (ROUNDS + 2)  # nobody finishes while timed
    engine = build_engine(EngineConfig(
        model="tiny", device="cpu", strategy="paged", batching="continuous",
        max_num_seqs=RUNNING, max_model_len=256, kv_memory="64MiB",
    )).engine
    for i in range(RUNNING):
        prompt = tuple((i * 31 + j * 7) % 2048 for j in range(PROMPT_LEN))
        engine.add_request(Request(i, 0.0, prompt, output_len))
    while engine.waiting or engine.steps[-1].num_prefill_seqs:  # prefills, then one decode
        engine.step()
    first = len(engine.steps)

    def decode_steps() -> None:
        for _ in range(DECODE_STEPS):
            engine.step()

    benchmark.pedantic(decode_steps, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    timed = engine.steps[first:]
    assert timed and all(r.num_decode_seqs == RUNNING for r in timed)
    step_ms = sum(r.step_ms for r in timed)
    overhead_ms = sum(r.overhead_ms for r in timed)
    fraction = overhead_ms / step_ms
    benchmark.extra_info.update({
        "running": RUNNING,
        "steps": len(timed),
        "step_ms_mean": step_ms / len(timed),
        "overhead_ms_mean": overhead_ms / len(timed),
        "overhead_fraction": fraction,
    })
    assert fraction < MAX_OVERHEAD_FRACTION, (
        f"scheduler + allocator overhead {fraction:.1%} of step time at {RUNNING} running"
    )
