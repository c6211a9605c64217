"""The model engine with a host tier (`--kv-offload`) on the CPU: a conversation's history
evicted from the GPU cache by other traffic comes back from the host tier (stored, then
loaded into other arena blocks), and every request decodes the same greedy tokens as
`prefix` without the tier, under each batching policy."""

from __future__ import annotations

import pytest

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.workloads import load_workload


@pytest.fixture(scope="module")
def model_cache():
    return {}


@pytest.fixture(scope="module")
def turns():
    """Conversations' turns in an order where each history returns after the others."""
    requests = load_workload("chat", 24, seed=5, vocab_size=2048,
                             num_system_prompts=6, turns_per_conversation=4
                             ).requests
    requests = [r.__class__(**{**r.__dict__, "output_len": min(r.output_len, 12)})
                for r in requests]
    return sorted(requests, key=lambda r: (len(r.prompt_token_ids), r.request_id))


def run(turns, model_cache, **options):
    built = build_engine(EngineConfig(kv_memory="1MiB", max_model_len=1024, strategy="prefix",
                                      **options), model_cache=model_cache)
    engine = built.engine
    for request in turns:  # one at a time: the others' blocks push a history out
        engine.add_request(request)
        engine.run_to_completion()
    assert engine.strategy.is_whole(), "leaked KV memory"
    return {rid: seqs[0].token_ids for rid, seqs in engine.sequences.items()}, engine


@pytest.mark.parametrize("batching", ["continuous", "vllm-v1"])
def test_a_host_tier_returns_the_same_tokens(turns, model_cache, batching):
    alone, _ = run(turns, model_cache, batching=batching)
    tiered, engine = run(turns, model_cache, batching=batching, kv_offload="4MiB",
                         kv_offload_policy="arc")
    stats = engine.strategy.stats()
    assert stats["host_loaded_blocks"] > 0 and stats["host_hit_tokens"] > 0
    assert engine.executor.host_tier.totals.load_blocks == stats["host_loaded_blocks"]
    assert tiered == alone


def test_hybrid_prefix_with_a_host_tier_returns_the_same_tokens(model_cache):
    """`hybrid-prefix` (a sliding-window model): every allocation group's blocks are stored
    and loaded back; the tokens are those of `hybrid-prefix` alone."""
    requests = load_workload("chat", 24, seed=7, vocab_size=2048, num_system_prompts=6,
                             turns_per_conversation=4).requests
    requests = sorted([r.__class__(**{**r.__dict__, "output_len": min(r.output_len, 12)})
                       for r in requests], key=lambda r: (len(r.prompt_token_ids), r.request_id))
    options = dict(model="tiny-hybrid", strategy="hybrid-prefix", kv_memory="2MiB",
                   max_model_len=1024)

    def run(**more):
        engine = build_engine(EngineConfig(**options, **more), model_cache=model_cache).engine
        for request in requests:
            engine.add_request(request)
            engine.run_to_completion()
        assert engine.strategy.is_whole(), "leaked KV memory"
        return {rid: s[0].token_ids for rid, s in engine.sequences.items()}, engine

    alone, _ = run()
    tiered, engine = run(kv_offload="4MiB")
    assert engine.strategy.stats()["host_loaded_blocks"] > 0
    assert tiered == alone
