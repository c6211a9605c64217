"""`vllm-v1` batching: vLLM v1's token budget, running requests first, prompt chunks after,
preemption of the most recently admitted, prefix hits outside the budget."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from kvbench.cli import main
from kvbench.engine.engine import Engine
from tests.scheduling.helpers import (
    TINY_BYTES_PER_SLOT,
    PreemptionOrder,
    drive,
    generated,
    make_engine,
    prompt_of,
    request,
    shared_reference,
)


def record_schedules(engine: Engine) -> list[list[tuple[int, int]]]:
    """Each step's `(request id, tokens)` in schedule order, appended as the engine steps."""
    steps: list[list[tuple[int, int]]] = []
    schedule = engine.policy.schedule

    def recording(now_s: float):
        out = schedule(now_s)
        steps.append([(seq.request.request_id, n) for seq, n in out.scheduled])
        return out

    engine.policy.schedule = recording
    return steps


def v1_engine(**options) -> Engine:
    options.setdefault("max_model_len", 64)
    options.setdefault("kv_memory", "1MiB")
    # The synchronous scheduler unless a test asks for async scheduling (`vllm-v1`'s default).
    options.setdefault("async_scheduling", False)
    return make_engine(batching="vllm-v1", **options)


def test_budget_goes_to_decodes_first_then_to_a_prompt_chunk():
    engine = v1_engine(max_num_batched_tokens=8)
    steps = record_schedules(engine)
    engine.add_request(request(0, prompt_of(0, 4), 10))
    engine.add_request(request(1, prompt_of(1, 4), 10))
    engine.step()
    engine.step()
    engine.add_request(request(2, prompt_of(2, 20), 2))
    engine.step()
    engine.step()
    assert steps[0] == [(0, 4), (1, 4)]
    assert steps[1] == [(0, 1), (1, 1)]
    # the two decodes, then the new prompt's chunk fills the rest of the budget
    assert steps[2] == [(0, 1), (1, 1), (2, 6)]
    assert steps[3] == [(0, 1), (1, 1), (2, 6)]


def test_a_long_prompt_is_chunked_across_steps_below_max_model_len():
    # chunked prefill is always on: a budget below --max-model-len is accepted
    engine = v1_engine(max_num_batched_tokens=8, chunked_prefill=False)
    assert engine.policy.limits.chunked_prefill
    steps = record_schedules(engine)
    drive(engine, [(0, request(0, prompt_of(3, 20), 3))])
    assert steps == [[(0, 8)], [(0, 8)], [(0, 4)], [(0, 1)], [(0, 1)]]
    assert generated(engine, 0) == [shared_reference().tokens(prompt_of(3, 20), 3)]


def test_the_preemption_victim_is_the_most_recently_admitted():
    # 6 blocks of 4: three 4-token prompts take 3, their second blocks the other 3; request 0's
    # third block then has to come from the last admitted (2), not from 1
    engine = v1_engine(strategy="paged", block_size=4, watermark=0.0,
                       kv_memory=24 * TINY_BYTES_PER_SLOT)
    order = PreemptionOrder()
    drive(engine, [(0, request(i, prompt_of(i, 4), 8)) for i in range(3)], check=order)
    victims = [[seq.request.request_id for seq in step] for step in order.victims if step]
    assert victims[0] == [2]
    assert engine.sequences[2][0].preemptions >= 1
    assert engine.sequences[0][0].preemptions == engine.sequences[1][0].preemptions == 0
    for r in range(3):
        assert generated(engine, r) == [shared_reference().tokens(prompt_of(r, 4), 8)]


def test_a_prefix_hit_leaves_its_cached_tokens_out_of_the_budget():
    engine = v1_engine(strategy="prefix", block_size=4, max_num_batched_tokens=8)
    steps = record_schedules(engine)
    shared = prompt_of(5, 16)
    drive(engine, [(0, request(0, shared, 1))])
    steps.clear()
    engine.add_request(request(1, shared + prompt_of(6, 4), 2))
    engine.add_request(request(2, prompt_of(7, 6), 2))
    engine.step()
    assert engine.sequences[1][0].cached_prompt_tokens == 16
    # request 1 computes its 4 new tokens only; request 2 gets the other 4 of the budget
    assert steps[0] == [(1, 4), (2, 4)]


@pytest.mark.parametrize("command", ["run", "simulate"])
def test_the_real_engine_and_the_simulator_mix_decodes_and_chunks_in_one_budget(
    command, tmp_path, capsys
):
    # a budget below --max-model-len, with --no-chunked-prefill: vllm-v1 always chunks (docs/cli.md)
    assert main([command, "--batching", "vllm-v1", "--num-requests", "8", "--no-chunked-prefill",
                 "--max-num-batched-tokens", "32", "--out", str(tmp_path), "--quiet"]) == 0
    (folder,) = (p for p in tmp_path.iterdir() if p.is_dir())
    engine = json.loads((folder / "config.json").read_text())["run"]["engine"]
    assert engine["batching"] == "vllm-v1" and engine["chunked_prefill"] is True
    assert json.loads((folder / "kvbench_summary.json").read_text())["completed"] == 8
    steps = pd.read_csv(folder / "steps.csv")
    assert steps["num_batched_tokens"].max() == 32
    mixed = steps[(steps["num_prefill_seqs"] > 0) & (steps["num_decode_seqs"] > 0)]
    assert len(mixed) > 0, "no step ran decodes and a prompt chunk together"


def test_blocks_are_taken_per_scheduled_chunk_after_a_whole_prompt_check():
    """As vLLM's `allocate_slots`: admission checks that the whole prompt fits, then takes
    the blocks of the chunk the step computes; later chunks take theirs."""
    engine = v1_engine(strategy="paged", block_size=4, watermark=0.0, max_num_batched_tokens=8,
                       kv_memory=24 * TINY_BYTES_PER_SLOT)
    pool = engine.policy.cache.pool
    engine.add_request(request(0, prompt_of(0, 20), 2))
    held = []
    for _ in range(3):
        engine.step()
        held.append(pool.num_blocks - pool.num_free)
    assert held == [2, 4, 5]  # 8, 16, then all 20 prompt tokens
    # 6 blocks: a 12-token prompt's first chunk (2 blocks) would fit, the whole (3) does not
    engine.add_request(request(1, prompt_of(1, 12), 2))
    engine.step()
    assert engine.sequences[1][0].num_computed == 0


def test_a_step_that_preempts_every_running_request_admits_nothing(monkeypatch):
    """vLLM admits from the queue only in a step that preempted no one: when the only
    running request cannot grow and preempts itself, the step is empty (no error, no
    admission) and the next step admits it again, with the request behind it."""
    engine = v1_engine(strategy="paged", block_size=4, watermark=0.0)
    steps = record_schedules(engine)
    engine.add_request(request(0, prompt_of(0, 4), 6))
    engine.step()  # the prompt; its first token
    engine.add_request(request(1, prompt_of(1, 4), 2))
    allocate = engine.strategy.allocate
    refused = []

    def refuse_request_0_once(seq, num_new_tokens):
        if seq.request.request_id == 0 and not refused:
            refused.append(seq)
            return False  # as if its next block were taken
        return allocate(seq, num_new_tokens)

    monkeypatch.setattr(engine.strategy, "allocate", refuse_request_0_once)
    assert engine.step() == []
    assert steps[-1] == [] and engine.num_running == 0
    assert [s.request.request_id for s in engine.waiting] == [0, 1]
    assert engine.sequences[0][0].preemptions == 1
    engine.step()
    assert steps[-1] == [(0, 5), (1, 4)]  # recomputes its prompt and token; then request 1
    drive(engine)
    assert generated(engine, 0) == [shared_reference().tokens(prompt_of(0, 4), 6)]
