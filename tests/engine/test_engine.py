"""The engine: strategy independence, exact output lengths, determinism, a whole pool after."""

from __future__ import annotations

import pytest

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.workloads import load_workload

CASES = [
    ("contiguous", {"reserve": "max"}),
    ("contiguous", {"reserve": "pow2"}),
    ("contiguous", {"reserve": "exact"}),
    ("paged", {"block_size": 1}),
    ("paged", {"block_size": 16}),
    ("paged", {"block_size": 32}),
]


@pytest.fixture(scope="module")
def model_cache():
    return {}


@pytest.fixture(scope="module")
def chat_requests():
    requests = load_workload("chat", 10, seed=3, vocab_size=2048).requests
    return [r.__class__(**{**r.__dict__, "output_len": min(r.output_len, 24)}) for r in requests]


def run(requests, model_cache, **options):
    built = build_engine(EngineConfig(kv_memory="6MiB", max_model_len=1024, **options),
                         model_cache=model_cache)
    engine = built.engine
    for request in requests:
        engine.add_request(request)
    engine.run_to_completion()
    assert engine.strategy.is_whole(), "leaked KV memory"
    return {rid: seqs[0].token_ids for rid, seqs in engine.sequences.items()}, engine


@pytest.fixture(scope="module")
def baseline(chat_requests, model_cache):
    return run(chat_requests, model_cache, strategy="paged")[0]


@pytest.mark.parametrize(("strategy", "options"), CASES)
@pytest.mark.parametrize("batching", ["continuous", "static"])
def test_every_strategy_and_policy_returns_the_same_tokens(
    chat_requests, model_cache, baseline, strategy, options, batching
):
    tokens, engine = run(chat_requests, model_cache, strategy=strategy, batching=batching,
                         **options)
    assert tokens == baseline
    for request in chat_requests:
        (seq,) = engine.sequences[request.request_id]
        assert seq.num_generated == request.output_len


def test_same_config_same_schedule_and_tokens(chat_requests, model_cache):
    first_tokens, first = run(chat_requests, model_cache, strategy="paged", temperature=0.8)
    second_tokens, second = run(chat_requests, model_cache, strategy="paged", temperature=0.8)
    assert first_tokens == second_tokens
    shape = [(s.num_prefill_seqs, s.num_decode_seqs, s.num_batched_tokens) for s in first.steps]
    assert shape == [
        (s.num_prefill_seqs, s.num_decode_seqs, s.num_batched_tokens) for s in second.steps
    ]


def test_sampled_tokens_do_not_depend_on_the_batch(chat_requests, model_cache):
    batched, _ = run(chat_requests, model_cache, strategy="paged", temperature=1.0)
    alone, _ = run(chat_requests, model_cache, strategy="paged", temperature=1.0, max_num_seqs=1)
    assert batched == alone


def test_max_num_seqs_bounds_the_running_batch(chat_requests, model_cache):
    _, engine = run(chat_requests, model_cache, strategy="paged", max_num_seqs=3)
    assert max(s.num_running for s in engine.steps) <= 3
    assert max(s.num_prefill_seqs + s.num_decode_seqs for s in engine.steps) <= 3


def test_memory_split_adds_up_to_the_arena_every_step(chat_requests, model_cache):
    for strategy in ("contiguous", "paged"):
        _, engine = run(chat_requests, model_cache, strategy=strategy)
        arena = engine.strategy.capacity_tokens * engine.bytes_per_slot
        for s in engine.steps:
            parts = (s.kv_token_bytes, s.kv_reserved_bytes, s.kv_internal_bytes,
                     s.kv_external_bytes, s.kv_free_bytes)
            assert min(parts) >= 0
            assert sum(parts) >= arena  # paged: plus a sub-block remainder counted as free
