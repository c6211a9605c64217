"""`fp8`: paged bookkeeping over an fp8 (e4m3) KV arena with per-layer scales."""

from __future__ import annotations

import random

import pytest
import torch

import kvbench
from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.execution.model_executor import FP8_SCALE_TARGET, KVArena
from kvbench.models.presets import get_preset
from kvbench.strategies.paged import PagedStrategy
from kvbench.strategies.prefix import PrefixCachingStrategy

MODELS: dict = {}


def build(**options):
    options.setdefault("kv_memory", "4MiB")
    return build_engine(EngineConfig(**options), model_cache=MODELS)


def test_fp8_holds_exactly_twice_the_tokens_of_bf16_and_four_times_fp32():
    bf16 = build(strategy="paged", dtype="bfloat16")
    fp8 = build(strategy="fp8", dtype="bfloat16")
    fp32 = build(strategy="paged", dtype="float32")
    fp8_on_fp32 = build(strategy="fp8", dtype="float32")
    assert fp8.kv_dtype == torch.float8_e4m3fn and bf16.kv_dtype == torch.bfloat16
    assert fp8.kv_budget_bytes == bf16.kv_budget_bytes == fp32.kv_budget_bytes
    assert fp8.bytes_per_slot * 2 == bf16.bytes_per_slot
    assert fp8.engine.strategy.capacity_tokens == 2 * bf16.engine.strategy.capacity_tokens
    assert fp8_on_fp32.engine.strategy.capacity_tokens == 4 * fp32.engine.strategy.capacity_tokens
    strategy = fp8.engine.strategy
    assert type(strategy) is PagedStrategy, "fp8 keeps paged's books: only the cache dtype differs"
    assert fp8.engine.executor.arena.nbytes <= fp8.kv_budget_bytes


def test_kv_cache_dtype_fp8_composes_with_prefix():
    built = build(strategy="prefix", kv_cache_dtype="fp8")
    assert isinstance(built.engine.strategy, PrefixCachingStrategy)
    assert built.kv_dtype == torch.float8_e4m3fn
    assert built.engine.strategy.namespace.endswith("/fp8")
    rng = random.Random(0)
    system = [rng.randrange(2048) for _ in range(40)]
    prompts = [system + [rng.randrange(2048) for _ in range(rng.randint(2, 12))] for _ in range(4)]
    options = dict(kv_cache_dtype="fp8", kv_memory="4MiB", max_num_seqs=1)
    paged = kvbench.generate(prompts, 6, strategy="paged", **options)
    prefix = kvbench.generate(prompts, 6, strategy="prefix", **options)
    fp8 = kvbench.generate(prompts, 6, strategy="fp8", kv_memory="4MiB", max_num_seqs=1)
    assert paged == fp8  # `fp8` is exactly paged + --kv-cache-dtype fp8
    assert prefix == paged  # cached fp8 blocks hold what recomputing them would write


def test_arena_scales_from_first_write_then_fixed():
    config = get_preset("tiny")
    arena = KVArena(config.kv_groups(1), 64, torch.float8_e4m3fn, "cpu")
    k = torch.randn(10, config.num_kv_heads, config.head_dim) * 3
    v = torch.randn(10, config.num_kv_heads, config.head_dim)
    arena.init_scales(1, k, v)
    assert arena.k_scales[1].dim() == 0 and arena.k_scales[1].dtype == torch.float32
    torch.testing.assert_close(arena.k_scales[1], k.abs().max() / FP8_SCALE_TARGET)
    torch.testing.assert_close(arena.v_scales[1], v.abs().max() / FP8_SCALE_TARGET)
    arena.init_scales(1, k * 100, v * 100)  # later writes never change them
    torch.testing.assert_close(arena.k_scales[1], k.abs().max() / FP8_SCALE_TARGET)
    assert arena.k_scales[0] is None
    arena.init_scales(0, torch.zeros_like(k), v)  # an all-zero first write keeps a usable scale
    assert arena.k_scales[0] > 0
    given = KVArena(config.kv_groups(1), 64, torch.float8_e4m3fn, "cpu", kv_scale=0.05)
    assert all(float(s) == pytest.approx(0.05) for s in given.k_scales + given.v_scales)
    # kv_scale is ignored by an unquantized arena
    plain = KVArena(config.kv_groups(4), 64, torch.float32, "cpu", kv_scale=0.05)
    assert plain.k_scales == [None] * config.num_layers and plain.scales() == {}
    assert plain.nbytes == 64 * config.kv_bytes_per_token(4)  # the groups' bytes per token


def test_engine_sets_every_layer_scale_once():
    built = build(strategy="fp8")
    engine, arena = built.engine, built.engine.executor.arena
    engine.add_request(Request(0, 0.0, tuple(range(1, 30)), 4))
    engine.run_to_completion()
    first = arena.scales()
    assert all(s is not None and s > 0 for s in first["k"] + first["v"])
    engine.add_request(Request(1, 0.0, tuple(range(500, 560)), 4))
    engine.run_to_completion()
    assert arena.scales() == first
    assert engine.strategy.is_whole()


def test_given_kv_scale_is_used():
    built = build(strategy="fp8", kv_scale=0.01)
    assert built.engine.executor.arena.scales()["k"] == [pytest.approx(0.01)] * 4


def test_fp8_admits_twice_the_concurrent_sequences_of_bf16_when_memory_bound():
    # 12 requests of 40 + 8 tokens: 47 KV slots each, 3 blocks of 16; an arena of 9 bf16 blocks
    requests = [Request(i, 0.0, tuple(range(i, i + 40)), 8) for i in range(12)]
    budget = 9 * 16 * get_preset("tiny").kv_bytes_per_token(2)
    peaks = {}
    for strategy in ("paged", "fp8"):
        engine = build(strategy=strategy, dtype="bfloat16", kv_memory=budget, watermark=0.0).engine
        for request in requests:
            engine.add_request(request)
        peak = 0
        while engine.has_unfinished():
            engine.step()
            peak = max(peak, engine.steps[-1].num_running)
        engine.drain()
        peaks[strategy] = peak
        assert engine.strategy.is_whole()
    assert peaks == {"paged": 3, "fp8": 6}
