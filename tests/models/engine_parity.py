"""The engine-parity scenarios every model family's tests run against transformers: greedy
tokens through kvbench's engine equal `generate()`'s in prefill + decode, chunked prefill,
preemption and a prefix hit (each family gives its own prompt lengths and KV budgets)."""

from __future__ import annotations

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from tests.conftest import random_prompts
from tests.models.test_parity_hf import hf_greedy


def engine_tokens(folder, prompts: list[list[int]], new_tokens: int, **options):
    """Greedy tokens through kvbench's engine (all requests at once) and its sequences."""
    engine = build_engine(EngineConfig(model=str(folder), device="cpu", **options)).engine
    for i, prompt in enumerate(prompts):
        engine.add_request(Request(i, 0.0, tuple(prompt), new_tokens))
    engine.run_to_completion()
    seqs = [engine.sequences[i][0] for i in range(len(prompts))]
    return [s.token_ids[len(p):] for s, p in zip(seqs, prompts, strict=True)], seqs


def check_prefill_and_decode(folder, hf_model, min_len: int, max_len: int) -> None:
    prompts = random_prompts(4, 512, seed=1, min_len=min_len, max_len=max_len)
    got, _ = engine_tokens(folder, prompts, 24, kv_memory="4MiB")
    assert got == hf_greedy(hf_model, prompts, 24)


def check_chunked_prefill(folder, hf_model, min_len: int, max_len: int) -> None:
    """Prompts of `min_len`+ tokens under a 64-token step budget."""
    prompts = random_prompts(3, 512, seed=5, min_len=min_len, max_len=max_len)
    got, _ = engine_tokens(folder, prompts, 16, kv_memory="4MiB", chunked_prefill=True,
                           max_num_batched_tokens=64)
    assert got == hf_greedy(hf_model, prompts, 16)


def check_preemption(folder, hf_model, kv_memory: str) -> None:
    """Three ~190-token prompts growing 48 tokens each in `kv_memory` (420 tokens of KV)."""
    prompts = random_prompts(3, 512, seed=2, min_len=180, max_len=200)
    got, seqs = engine_tokens(folder, prompts, 48, kv_memory=kv_memory, max_model_len=260)
    assert sum(s.preemptions for s in seqs) > 0
    assert got == hf_greedy(hf_model, prompts, 48)


def check_state_preemption(folder, hf_model) -> None:
    """A state-space hybrid under `paged`: three ~190-token prompts growing 48 tokens each in
    a pool that admits them all but cannot grow them all, so a sequence is preempted, its
    state blocks go to another and it recomputes from zeros."""
    built = build_engine(EngineConfig(model=str(folder), device="cpu", kv_memory="4MiB"))
    strategy = built.engine.strategy
    bytes_per_block = built.engine.executor.arena.nbytes // strategy.pool.num_blocks
    prompts = random_prompts(3, 512, seed=2, min_len=180, max_len=200)

    def blocks(tokens: int) -> int:
        return -(-tokens // strategy.block_size) + strategy.state_blocks

    admitted = sum(blocks(len(p)) for p in prompts)
    final = sum(blocks(len(p) + 48) for p in prompts)
    assert admitted + 2 < final
    got, seqs = engine_tokens(folder, prompts, 48,
                              kv_memory=f"{(admitted + final) // 2 * bytes_per_block}B",
                              max_model_len=260)
    assert sum(s.preemptions for s in seqs) > 0
    assert got == hf_greedy(hf_model, prompts, 48)


def check_prefix_hit(folder, hf_model) -> None:
    """A 200-token shared prefix: later requests reuse its cached blocks, then decode past it."""
    shared = random_prompts(1, 512, seed=3, min_len=200, max_len=200)[0]
    prompts = [shared + tail for tail in random_prompts(3, 512, seed=4, min_len=10, max_len=40)]
    got, seqs = engine_tokens(folder, prompts, 24, strategy="prefix", kv_memory="4MiB")
    assert [s.cached_prompt_tokens >= 192 for s in seqs] == [False, True, True]
    assert got == hf_greedy(hf_model, prompts, 24)


def check_state_prefix_hits(folder, hf_model, mamba_cache_mode: str = "align",
                            **engine_options) -> None:
    """A state-space hybrid under `prefix`: hits restore a cached state checkpoint.

    One request at a time, prefill chunks of two blocks, so the first request's chunks end
    on block boundaries (where `align` keeps its running state as a checkpoint): the next
    ones share its first 4 blocks and a half and hit the 4 blocks before. The last request's
    prompt is the first's prompt and output: its hit ends at a checkpoint decode took.
    """
    options = dict(device="cpu", strategy="prefix", kv_memory="4MiB", chunked_prefill=True,
                   mamba_cache_mode=mamba_cache_mode, **engine_options)
    engine = build_engine(EngineConfig(model=str(folder), **options)).engine
    bs = engine.strategy.block_size
    engine = build_engine(EngineConfig(model=str(folder), max_num_batched_tokens=2 * bs,
                                       **options)).engine
    shared = random_prompts(1, 512, seed=3, min_len=4 * bs + bs // 2,
                            max_len=4 * bs + bs // 2)[0]
    prompts = [shared + tail for tail in random_prompts(3, 512, seed=4, min_len=3, max_len=9)]
    new_tokens = bs  # decode crosses a block boundary of the first request
    got = []
    for i, prompt in enumerate(prompts):
        engine.add_request(Request(i, 0.0, tuple(prompt), new_tokens))
        engine.run_to_completion()
        got.append(engine.sequences[i][0].token_ids[len(prompt):])
    last = prompts[0] + got[0]
    engine.add_request(Request(len(prompts), 0.0, tuple(last), 4))
    engine.run_to_completion()
    seqs = [engine.sequences[i][0] for i in range(len(prompts) + 1)]
    assert [s.cached_prompt_tokens for s in seqs] == [
        0, 4 * bs, 4 * bs, (len(last) - 1) // bs * bs]
    assert engine.strategy.stats()["state_checkpoints"] > 0
    assert got == hf_greedy(hf_model, prompts, new_tokens)
    assert seqs[-1].token_ids[len(last):] == hf_greedy(hf_model, [last], 4)[0]


def check_strategy_holds_state(folder, hf_model, strategy: str, min_len: int,
                               max_len: int) -> None:
    """A state-space hybrid under `strategy`: greedy tokens equal transformers' through
    prefill + decode, chunked prefill (64-token steps) and parallel sampling (a fork copies
    the state), the state where the strategy holds it."""
    prompts = random_prompts(4, 512, seed=1, min_len=min_len, max_len=max_len)
    got, _ = engine_tokens(folder, prompts, 16, strategy=strategy, kv_memory="4MiB")
    assert got == hf_greedy(hf_model, prompts, 16)
    got, _ = engine_tokens(folder, prompts[:3], 12, strategy=strategy, kv_memory="4MiB",
                           chunked_prefill=True, max_num_batched_tokens=64)
    assert got == hf_greedy(hf_model, prompts[:3], 12)
    engine = build_engine(EngineConfig(model=str(folder), device="cpu", strategy=strategy,
                                       kv_memory="4MiB", temperature=0.0)).engine
    engine.add_request(Request(0, 0.0, tuple(prompts[0]), 8, n=2))
    engine.run_to_completion()
    want = hf_greedy(hf_model, prompts[:1], 8)[0]
    assert [s.token_ids[len(prompts[0]):] for s in engine.sequences[0]] == [want, want]
