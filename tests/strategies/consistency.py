"""Whole-state consistency checks of the block strategies, for the tests: reference counts,
the hash index and the pending blocks agree with the block tables."""

from __future__ import annotations

from kvbench.core.sequence import Sequence
from kvbench.strategies.host_tier import HostTier, is_swap_key
from kvbench.strategies.hybrid import FREED, HybridStrategy
from kvbench.strategies.prefix import PrefixCachingStrategy
from kvbench.strategies.prefix_index import CachingBlockPool


def check_pool(pool: CachingBlockPool) -> None:
    """Every block is in exactly one state (free, held, evictable), and the index agrees."""
    free_list = pool.free_blocks()
    free = set(free_list)
    evictable = set(pool.evictable)
    held = {b for b in range(pool.num_blocks) if pool.ref_counts[b] > 0}
    assert len(free) == len(free_list), "a block is on the free list twice"
    assert not (free & evictable) and not (free & held) and not (evictable & held)
    assert free | evictable | held == set(range(pool.num_blocks)), "a block is lost"
    assert all(c >= 0 for c in pool.ref_counts)
    assert pool.shared == {b for b, c in enumerate(pool.ref_counts) if c > 1}, "shared set"
    assert not (free & set(pool.hash_of)), "a free block keeps a hash"
    assert evictable <= set(pool.hash_of), "an evictable block has no hash"
    assert len(pool.hash_of) == len(pool.block_of)
    assert all(pool.block_of[h] == b for b, h in pool.hash_of.items())


def check_host_tier(tier: HostTier) -> None:
    """Every host block in exactly one state (free, storing, ready: idle, loading or pinned),
    the index and the eviction policy agree."""
    free = set(tier._free)
    named = set(tier.key_of)
    assert len(free) == len(tier._free), "a host block is free twice"
    assert not free & named and free | named == set(range(tier.num_blocks)), \
        "a host block is lost or both free and named"
    assert all(tier.block_of[k] == b for b, k in tier.key_of.items())
    assert len(tier.block_of) == len(tier.key_of)
    assert tier.storing <= named and set(tier.readers) <= named
    assert not tier.storing & set(tier.readers), "a block is loaded while being stored"
    assert all(n > 0 for n in tier.readers.values())
    pins = set(tier.pins)
    assert pins <= named and all(n > 0 for n in tier.pins.values())
    assert tier.private <= pins | set(tier.readers) | tier.storing, \
        "a private block nobody holds"
    assert all(is_swap_key(tier.key_of[b]) for b in tier.private)
    busy = set(tier.readers) | pins
    idle = {tier.key_of[b] for b in named - tier.storing - busy}
    if hasattr(tier.policy, "idle"):  # LRU
        assert set(tier.policy.idle) == idle, "the LRU's idle keys differ"
    else:
        p = tier.policy
        ready = {tier.key_of[b] for b in named - tier.storing}
        assert set(p.t1) | set(p.t2) == ready and not set(p.t1) & set(p.t2)
        assert p.busy == {tier.key_of[b] for b in busy - tier.storing}
        assert len(p.b1) <= tier.num_blocks and len(p.b2) <= tier.num_blocks
        assert not (set(p.b1) | set(p.b2)) & set(tier.block_of) - {
            tier.key_of[b] for b in tier.storing}


def held_blocks(strategy: HybridStrategy, seq: Sequence) -> list[int]:
    """Blocks the sequence holds in each allocation group."""
    return [sum(1 for b in t if b != FREED) for t in strategy.tables.get(seq.seq_id, [])]


def check_consistency(strategy: PrefixCachingStrategy | HybridStrategy) -> None:
    """Reference counts (and for a prefix cache its index) agree with the block tables."""
    if isinstance(strategy, HybridStrategy):
        owners = [0] * strategy.pool.num_blocks
        for tables in strategy.tables.values():
            for table in tables:
                for block in table:
                    if block != FREED:
                        owners[block] += 1
        for pages in strategy.states.values():  # a hybrid's state pages, beside the tables
            for block in pages:
                owners[block] += 1
        assert owners == strategy.pool.ref_counts, "reference counts differ from the tables"
        if isinstance(strategy.pool, CachingBlockPool):
            check_pool(strategy.pool)
        return
    pool = strategy.pool
    check_pool(pool)
    owners = [0] * pool.num_blocks
    for seq_id, table in strategy.tables.items():
        assert len(set(table)) == len(table), f"sequence {seq_id} holds a block twice"
        for block in table:
            owners[block] += 1
        hashes = strategy.hashes[seq_id]
        assert len(hashes) <= len(table)
        for block, h in zip(table, hashes, strict=False):
            named = pool.hash_of.get(block)
            assert named is None or named == h, f"block {block} is named by another prefix"
    for pages in strategy.states.values():  # a hybrid's state blocks, held beside the tables
        for block in pages:
            owners[block] += 1
    assert strategy._state_held == sum(map(len, strategy.states.values()))
    assert owners == pool.ref_counts, "reference counts differ from the block tables"
    assert set(strategy.tables) == set(strategy.hashes) == set(strategy.live)
    pending, pending_hash = strategy._pending, strategy._pending_hash
    assert len(pending) == len(pending_hash)
    for h, (block, owner, index) in pending.items():
        assert pending_hash[block] == h and block not in pool.hash_of
        assert pool.ref_counts[block] > 0, "a pending block is not held"
        if owner >= 0:
            assert strategy.tables[owner][index] == block


def host_tier_idle(tier: HostTier) -> bool:
    """No copy in flight and no block pinned."""
    return not tier.storing and not tier.readers and not tier.pins
