"""Preemption by swap on the model engine (CPU): a KV arena too small for the running
requests' outputs preempts them; under `--preemption-mode swap` each victim's KV (its partial
last block too) is copied into the host tier's memory and back at its re-admission, and every
request decodes the same greedy tokens as under recompute, with or without the tier."""

from __future__ import annotations

import pytest

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.workloads import load_workload


@pytest.fixture(scope="module")
def model_cache():
    return {}


@pytest.fixture(scope="module")
def requests():
    """Twelve requests at once whose outputs outgrow a 384-token arena."""
    return load_workload("uniform", 12, seed=3, vocab_size=2048, prompt_len=37,
                         output_len=61).requests


def run(requests, model_cache, **options):
    built = build_engine(EngineConfig(kv_memory="384KiB", max_model_len=256, strategy="prefix",
                                      **options), model_cache=model_cache)
    engine = built.engine
    for request in requests:
        engine.add_request(request)
    engine.run_to_completion()
    assert engine.strategy.is_whole(), "leaked KV memory"
    return {rid: seqs[0].token_ids for rid, seqs in engine.sequences.items()}, engine


def preemptions(engine) -> int:
    return sum(s.preemptions for seqs in engine.sequences.values() for s in seqs)


@pytest.mark.parametrize("batching", ["continuous", "vllm-v1"])
def test_swapped_requests_decode_the_same_tokens(requests, model_cache, batching):
    alone, plain = run(requests, model_cache, batching=batching)
    recomputed, _ = run(requests, model_cache, batching=batching, kv_offload="4MiB")
    swapped, engine = run(requests, model_cache, batching=batching, kv_offload="4MiB",
                          preemption_mode="swap")
    stats = engine.strategy.stats()
    assert 0 < stats["host_swap_out_requests"] <= preemptions(engine)
    assert preemptions(plain) > 0
    assert stats["host_swap_fallbacks"] == 0
    assert stats["host_swap_in_requests"] == stats["host_swap_out_requests"]
    assert stats["host_swap_out_copied_blocks"] > 0 and stats["host_swap_in_blocks"] > 0
    totals = engine.executor.host_tier.totals  # the copies really moved through host memory
    assert totals.store_blocks == stats["host_stored_blocks"]
    assert totals.load_blocks == stats["host_loaded_blocks"]
    assert len(engine.swap_in_waits_s) == stats["host_swap_in_requests"]
    assert swapped == alone
    assert recomputed == alone
