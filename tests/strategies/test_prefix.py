"""`prefix`: the same tokens as `paged` (fp32 greedy and seeded sampling), fewer prefill
tokens and fewer blocks, and the bookkeeping rules of the strategy itself."""

from __future__ import annotations

import random
import statistics
import warnings

import pytest

from kvbench.build.engines import build_engine
from kvbench.config import EngineConfig
from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.strategies import make_strategy
from kvbench.strategies.paged import PagedStrategy
from kvbench.strategies.prefix import PrefixCachingStrategy
from tests.strategies.consistency import check_consistency

VOCAB = 2048
MODELS: dict = {}  # one tiny model for the whole module


def shared_prefix_prompts(seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    system = [rng.randrange(VOCAB) for _ in range(48)]
    prompts = [system + [rng.randrange(VOCAB) for _ in range(rng.randint(1, 24))]
               for _ in range(6)]
    prompts.append(list(prompts[0]))  # a repeated prompt: all but its last block hit
    prompts.append(system[:32])  # a prompt that is exactly two cached 16-token blocks
    prompts.append(system[:33])
    return prompts


def run(strategy: str, requests: list[Request], **options):
    config = EngineConfig(strategy=strategy, kv_memory=options.pop("kv_memory", "4MiB"),
                          **options)
    engine = build_engine(config, model_cache=MODELS).engine
    for request in requests:
        engine.add_request(request)
    engine.run_to_completion()
    tokens = {
        rid: [seq.token_ids[seq.prompt_len :] for seq in group]
        for rid, group in engine.sequences.items()
    }
    return tokens, engine


def requests_of(prompts, output_len: int = 8, n: int = 1) -> list[Request]:
    return [Request(i, 0.0, tuple(p), output_len, n=n) for i, p in enumerate(prompts)]


@pytest.mark.parametrize("block_size", [1, 16])
def test_prefix_tokens_equal_paged_greedy(block_size):
    requests = requests_of(shared_prefix_prompts())
    # two sequences at a time, so later prompts find the earlier ones' blocks cached
    options = dict(block_size=block_size, max_num_seqs=2)
    expected, paged = run("paged", requests, **options)
    got, prefix = run("prefix", requests, **options)
    assert got == expected
    stats = prefix.strategy.stats()
    assert stats["cache_hits_blocks"] > 0
    assert prefix.prefill_tokens_computed < paged.prefill_tokens_computed
    assert prefix.strategy.is_whole()
    prompts = shared_prefix_prompts()
    cached = [group[0].cached_prompt_tokens for group in prefix.sequences.values()]
    assert all(c < len(p) for c, p in zip(cached, prompts, strict=True))
    if block_size == 16:
        assert cached[6] == (len(prompts[0]) - 1) // 16 * 16  # a repeat: all but the last token
        assert cached[7] == 16  # 32 tokens, both blocks cached: the last block is recomputed
        assert cached[8] == 32


@pytest.mark.parametrize(("batching", "chunked"), [("static", False), ("continuous", True)])
def test_prefix_tokens_equal_paged_other_schedulers(batching, chunked):
    requests = requests_of(shared_prefix_prompts(seed=1))
    options = dict(block_size=4, max_num_seqs=3, batching=batching, chunked_prefill=chunked,
                   max_num_batched_tokens=2048 if not chunked else 40)
    if chunked:
        options["max_model_len"] = 256
    expected, _ = run("paged", requests, **options)
    got, prefix = run("prefix", requests, **options)
    assert got == expected
    assert prefix.strategy.stats()["cache_hits_blocks"] > 0
    assert prefix.strategy.is_whole()


def prompt_blocks(engine) -> int:
    """Distinct physical blocks holding prompt KV of the running sequences."""
    strategy = engine.strategy
    blocks = set()
    for seq in engine.policy.running:
        table = strategy.tables.get(seq.seq_id, [])
        blocks.update(table[: strategy.blocks_for(seq.prompt_len)])
    return len(blocks)


def test_parallel_sampling_children_share_then_copy_on_write():
    """n=4 seeded samples: every child gets the same tokens as under `paged` (which copies
    the prompt at fork), while `prefix` holds the prompt once and copies only the partial
    last block when each child first writes into it."""
    rng = random.Random(3)
    prompts = [[rng.randrange(VOCAB) for _ in range(rng.randint(40, 90))] for _ in range(3)]
    requests = requests_of(prompts, output_len=6, n=4)
    options = dict(block_size=8, temperature=1.0)
    held = {}
    got = {}
    for strategy in ("paged", "prefix"):
        engine = build_engine(EngineConfig(strategy=strategy, kv_memory="4MiB", **options),
                              model_cache=MODELS).engine
        for request in requests:
            engine.add_request(request)
        peak = 0
        while engine.has_unfinished():
            engine.step()
            peak = max(peak, prompt_blocks(engine))
        engine.drain()
        held[strategy] = peak
        got[strategy] = {rid: [s.token_ids[s.prompt_len :] for s in group]
                         for rid, group in engine.sequences.items()}
        assert engine.strategy.is_whole()
    assert got["prefix"] == got["paged"]
    assert all(len(samples) == 4 for samples in got["prefix"].values())
    assert any(len({tuple(s) for s in samples}) > 1 for samples in got["prefix"].values())
    stats = engine.strategy.stats()
    assert stats["forks"] == 3 * 3  # n - 1 children per request
    partial = sum(1 for p in prompts if len(p) % 8)
    assert stats["cow_copies"] == 3 * partial  # n - 1 copies of each partial last block
    blocks = sum(-(-len(p) // 8) for p in prompts)
    assert held["paged"] == 4 * blocks
    assert held["prefix"] == blocks + 3 * partial  # ~4x fewer


def test_prefix_under_preemption_matches_paged():
    """A budget too small for all sequences at once: preemption frees blocks into the cache,
    recomputation hits them, eviction makes room; tokens still match `paged`."""
    rng = random.Random(4)
    system = [rng.randrange(VOCAB) for _ in range(24)]
    prompts = [system + [rng.randrange(VOCAB) for _ in range(rng.randint(4, 20))]
               for _ in range(8)]
    requests = requests_of(prompts, output_len=24)
    # 12 blocks of 8 tokens: each sequence ends at 52..67 tokens (7..9 blocks)
    options = dict(block_size=8, kv_memory=12 * 8 * 2048, watermark=0.0)
    expected, paged = run("paged", requests, **options)
    got, prefix = run("prefix", requests, **options)
    assert got == expected
    assert sum(s.preemptions for s in prefix.steps) > 0
    assert prefix.strategy.stats()["evictions"] > 0
    assert prefix.strategy.is_whole()


# Bookkeeping --------------------------------------------------------------------------------


def make_seq(seq_id: int, tokens: list[int], output_len: int = 4) -> Sequence:
    return Sequence(seq_id, Request(seq_id, 0.0, tuple(tokens), output_len), 0, list(tokens))


_probe_ids = iter(range(1000, 10**9))


def hits(cache: PrefixCachingStrategy, tokens: list[int]) -> int:
    """Cached blocks a new sequence with these tokens would reuse (without admitting it)."""
    return len(cache._match(make_seq(next(_probe_ids), tokens))[0])


def prefill(cache: PrefixCachingStrategy, seq: Sequence) -> int:
    """Admit and mark everything computed, as one engine step would."""
    assert cache.can_admit(seq, 0)
    cached = cache.admit(seq)
    seq.num_computed = cached
    cache.build_layout([(seq, seq.num_uncomputed)])
    seq.num_computed = len(seq.token_ids)
    return cached


def test_make_strategy_builds_prefix_and_fp8():
    prefix = make_strategy("prefix", 1024, 256, block_size=8, namespace="m/float32/auto")
    assert isinstance(prefix, PrefixCachingStrategy) and prefix.namespace == "m/float32/auto"
    fp8 = make_strategy("fp8", 1024, 256, block_size=8)
    assert type(fp8) is PagedStrategy and fp8.block_size == 8 and fp8.capacity_tokens == 1024


def test_hit_leaves_last_token_and_namespaces_do_not_mix():
    cache = PrefixCachingStrategy(64, 64, block_size=4, namespace="a")
    first = make_seq(0, list(range(8)))
    assert prefill(cache, first) == 0
    cache.free(first)
    again = make_seq(1, list(range(8)))  # both blocks cached, but the last token is recomputed
    assert prefill(cache, again) == 4
    cache.free(again)
    longer = make_seq(2, list(range(9)))
    assert prefill(cache, longer) == 8
    cache.free(longer)
    other = PrefixCachingStrategy(64, 64, block_size=4, namespace="b")
    assert hits(cache, list(range(9))) == 2
    assert hits(other, list(range(9))) == 0
    check_consistency(cache)
    assert cache.is_whole()


def test_eviction_is_lru_and_tail_first():
    cache = PrefixCachingStrategy(4 * 2, 64, block_size=2, watermark=0.0)  # 4 blocks of 2
    a = make_seq(0, [1, 2, 3, 4, 5])  # blocks [1,2] [3,4] and a partial [5]
    prefill(cache, a)
    cache.free(a)
    assert cache.pool.num_evictable == 2 and cache.pool.num_free == 4
    assert hits(cache, [1, 2, 3, 4, 5]) == 2
    c = make_seq(1, [9, 8, 7, 6, 5])  # 3 blocks: 2 free ones, then evicts a's *tail* block
    prefill(cache, c)
    assert cache.pool.evictions == 1
    assert hits(cache, [1, 2, 3, 4, 5]) == 1  # [1,2] survives
    cache.free(c)  # c's two full blocks become cache, more recently used than [1,2]
    b = make_seq(2, [7, 7, 7])  # 2 blocks: the free one, then the LRU cached one: [1,2]
    prefill(cache, b)
    assert cache.pool.evictions == 2
    assert not hits(cache, [1, 2, 3, 4, 5])
    assert hits(cache, [9, 8, 7, 6, 5]) == 2
    cache.free(b)
    check_consistency(cache)
    assert cache.is_whole()


def test_memory_split_counts_shared_blocks_once():
    cache = PrefixCachingStrategy(64, 64, block_size=4, watermark=0.0)
    parent = make_seq(0, list(range(10)), output_len=3)  # 10 prompt + 2 more KV = 12 final
    prefill(cache, parent)
    parent.token_ids.append(99)
    child = make_seq(1, list(range(10)), output_len=3)
    child.token_ids.append(98)
    assert cache.fork(parent, child) == []
    child.num_computed = 10
    split = cache.memory_split([parent, child], None)
    # 3 shared blocks (12 slots): 10 tokens, 2 slots both will fill (reserved), nothing wasted
    assert (split.token, split.reserved, split.internal) == (10, 2, 0)
    assert split.total == 64
    assert cache.allocate(parent, 1) and cache.allocate(child, 1)
    assert cache.cow_copies == 1  # the parent copied the partial block; the child kept it
    assert len(cache.pending_copies()) == 1
    parent.num_computed = child.num_computed = 11
    split = cache.memory_split([parent, child], None)
    assert (split.token, split.reserved, split.internal) == (8 + 3 + 3, 1 + 1, 0)
    cache.free(parent)
    cache.free(child)
    split = cache.memory_split([], None)
    assert split.cached == 8 and split.free == 64  # the two full blocks stay as cache
    assert cache.is_whole()


# Workload-level claims, on the cost model (no tensors: token ids do not matter here, the
# workloads fix every prompt and output length, and the simulated clock is deterministic)


def simulated_run(strategy: str, workload: str, num_requests: int, kv_memory: str, probe=None):
    from kvbench.build.engines import build_engine
    from kvbench.build.simulated_executors import SimulatedExecutors
    from kvbench.workloads import load_workload

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        requests = load_workload(workload, num_requests, 0, VOCAB, max_model_len=2048).requests
    config = EngineConfig(model="tiny", strategy=strategy, kv_memory=kv_memory)
    engine = build_engine(config, SimulatedExecutors("a100-80gb")).engine
    for request in requests:
        engine.add_request(request)
    samples = []
    while engine.has_unfinished():
        engine.step()
        if probe is not None:
            samples.append(probe(engine))
    engine.drain()
    assert engine.strategy.is_whole()
    return engine, samples


@pytest.mark.parametrize("kv_memory", ["16MiB", "64MiB"])
def test_chat_serves_most_prompt_tokens_from_cache_and_cuts_ttft(kv_memory):
    ttft = {}
    for strategy in ("paged", "prefix"):
        engine, _ = simulated_run(strategy, "chat", 64, kv_memory)
        groups = list(engine.sequences.values())
        ttft[strategy] = statistics.median(g[0].first_token_s - g[0].request.arrival_s
                                           for g in groups)
        if strategy == "prefix":
            prompt = sum(g[0].prompt_len for g in groups)
            cached = sum(g[0].cached_prompt_tokens for g in groups)
            assert cached / prompt >= 0.5  # 0.677: every reusable full block is reused
    assert ttft["prefix"] < 0.5 * ttft["paged"]


def test_parallel_n4_holds_four_times_fewer_prompt_blocks():
    def full_prompt_blocks(engine) -> int:
        strategy = engine.strategy
        blocks = set()
        for seq in engine.policy.running:
            blocks.update(strategy.tables.get(seq.seq_id, [])[: seq.prompt_len // 16])
        return len(blocks)

    _, paged = simulated_run("paged", "parallel", 16, "64MiB", full_prompt_blocks)
    _, prefix = simulated_run("prefix", "parallel", 16, "64MiB", full_prompt_blocks)
    assert max(paged) == 4 * max(prefix)
    assert sum(paged) >= 3.9 * sum(prefix)
