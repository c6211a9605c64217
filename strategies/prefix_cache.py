"""`PrefixCache`: what `prefix` and `hybrid-prefix` share on top of their allocators.

The caching pool (`prefix_index.py`), the root of their hash chains, the optional host tier
(`host_offload.py`) and its plumbing between steps, and the counters of the hit rate.
"""

from __future__ import annotations

from kvbench.core.layout import KVLayout
from kvbench.core.sequence import Sequence
from kvbench.errors import KvbenchInputError
from kvbench.strategies.host_offload import HostOffload
from kvbench.strategies.host_tier import HostTier
from kvbench.strategies.prefix_index import BlockHash, CachingBlockPool, extend_chain, root_hash
from kvbench.strategies.residency_books import ResidencyBooks
from kvbench.strategies.reuse_distance import ReuseDistance


class PrefixCache:
    """A mixin before the allocator's class; `_init_cache` runs after the allocator's
    `__init__` (it replaces the allocator's pool)."""

    reuse: ReuseDistance | None = None  # the lookups' reuse distances, where they are kept

    def _init_cache(self, namespace: str, kv_offload_blocks: int, kv_offload_policy: str,
                    state_blocks: int) -> None:
        if state_blocks and kv_offload_blocks:
            raise KvbenchInputError("--kv-offload: a state-space hybrid's states are not "
                                    "offloaded (not modelled)")
        self.pool: CachingBlockPool = CachingBlockPool(self.pool.num_blocks)
        self.namespace = namespace
        self._root = root_hash(namespace)
        # The host tier (`host_offload.py`); None: the GPU cache alone.
        self.host_tier = (HostOffload(HostTier(kv_offload_blocks, kv_offload_policy))
                          if kv_offload_blocks else None)
        self.live: dict[int, Sequence] = {}  # seq_id -> sequence holding a block table
        self._chains: dict[int, list[BlockHash]] = {}  # seq_id -> hash of each full block
        self.hit_tokens = 0
        self.query_tokens = 0  # tokens of admitted sequences (what a prefill would compute)

    def _chain(self, seq: Sequence) -> list[BlockHash]:
        """Hashes of every full block of the sequence's tokens (tokens only ever grow)."""
        return extend_chain(self._chains.setdefault(seq.seq_id, []), self._root, seq.token_ids,
                            self.block_size)

    def host_jobs_done(self, jobs: list[int]) -> list[Sequence]:
        """Host copies done (`Executor.finished_host_jobs`): loaded blocks join the GPU
        prefix cache under their keys; returns the sequences that stop waiting."""
        return [self.live[seq_id] for seq_id in self.host_tier.land(jobs, self.pool)]

    def build_layout(self, scheduled: list[tuple[Sequence, int]]) -> KVLayout:
        layout = super().build_layout(scheduled)
        if self.host_tier is not None:  # the step's jobs: the strategy waits on them, the
            layout.host_transfers = self.host_tier.take()  # model executor copies them
        return layout

    def is_whole(self) -> bool:
        return super().is_whole() and (self.host_tier is None or self.host_tier.is_whole())

    def reset_stats(self) -> None:
        """Zero the counters (after a warm-up); the cache itself stays."""
        self.pool.evictions = 0
        self.hit_tokens = self.query_tokens = 0
        if self.host_tier is not None:
            self.host_tier.reset_stats()
        self.residency_books().restart()

    def residency_books(self) -> ResidencyBooks:
        host = self.host_tier
        return ResidencyBooks(
            gpu=self.pool.residency, host=host.tier.residency if host is not None else None,
            reuse=self.reuse, gpu_blocks=self.pool.num_blocks,
            host_blocks=host.tier.num_blocks if host is not None else None,
            block_size=self.block_size)
