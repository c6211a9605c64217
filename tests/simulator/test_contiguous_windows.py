"""`kvbench simulate`'s `contiguous` on a windowed preset (Gemma 3: five 1024-token window
layers to one full layer) holds a ring per window group: more sequences run at once than
whole-context reservations would fit, and the per-group memory shows each window group
holding far less than the full-attention group."""

from __future__ import annotations

from kvbench.build.engines import build_engine
from kvbench.build.simulated_executors import SimulatedExecutors
from kvbench.config import EngineConfig
from kvbench.core.request import Request

MAX_MODEL_LEN = 8192


def run(strategy: str, **options):
    config = EngineConfig(model="gemma-3-27b", strategy=strategy, dtype="bfloat16",
                          max_model_len=MAX_MODEL_LEN, chunked_prefill=True,
                          max_num_batched_tokens=512, **options)
    built = build_engine(config, SimulatedExecutors("h100-80gb"))
    engine = built.engine
    for i in range(24):
        engine.add_request(Request(i, 0.0, tuple(range(3000)), 200))
    engine.run_to_completion()
    return built, engine


def test_rings_admit_more_than_whole_reservations_and_show_per_group():
    built, engine = run("contiguous")
    strategy = engine.strategy
    assert strategy.is_whole()
    whole_context_bytes = MAX_MODEL_LEN * built.model_config.kv_bytes_per_token(2)
    fits_without_rings = built.kv_budget_bytes // whole_context_bytes
    assert max(s.num_running for s in engine.steps) > 2 * fits_without_rings
    groups = engine.step_recorder.group_memory.summary()["kv_groups"]
    full = [g for g in groups if g["window"] is None]
    window = [g for g in groups if g["window"] is not None]
    assert full and window
    ring_slots = 1024 - 1 + 512  # W - 1 + the step budget
    for g in window:
        per_sequence = g["held_bytes_max"] / max(s.num_running for s in engine.steps)
        assert per_sequence <= ring_slots * g["bytes_per_slot"]
    assert all(g["held_bytes_max"] < full[0]["held_bytes_max"] / 4 for g in window)
