"""`hybrid-prefix`: `hybrid` with block-level prefix caching (vLLM's hybrid KV cache manager
with `--enable-prefix-caching`).

A full block is named, in each allocation group, by the chained hash of its tokens
(`prefix_index.py`) and the group's index; freed named blocks, a window group's freed behind
the window included, stay as evictable cache.

The longest hit is found as vLLM's coordinator does: a full-attention group needs every block
of the prefix cached, a window group of window W only the ceil((W - 1) / block) blocks before
the hit's end (`SlidingWindowManager.find_longest_cache_hit`), its earlier entries left
empty. A hit never covers the block holding the last token. Shared blocks are full and
computed by every holder, so the split counts each once (`HybridStrategy._g_shared`);
distinct prompt blocks are not counted. A step's full blocks are named when it is
scheduled (`_sync`), so a sequence admitted later in the step hits them; a fork copies as
`hybrid` does. No reuse distances are kept (a window group needs only part of a chain).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kvbench.core.sequence import Sequence
from kvbench.strategies.hybrid import FREED, HybridOptions, HybridStrategy
from kvbench.strategies.prefix_cache import PrefixCache
from kvbench.strategies.prefix_index import BlockHash
from kvbench.strategies.registry import register_strategy

HOST = -2  # a hit's table entry the host tier serves (a fresh block, loaded, at admission)


@dataclass(frozen=True)
class HybridPrefixOptions(HybridOptions):
    namespace: str = ""  # keys the hashes (model, dtypes): other configurations never match
    kv_offload_blocks: int = 0  # host tier blocks (pool pages); 0: none
    kv_offload_policy: str = "lru"


@register_strategy(
    "hybrid-prefix", "hybrid + block-level prefix caching (a window group needs only its "
    "window's blocks for a hit)", HybridPrefixOptions,
)
class HybridPrefixStrategy(PrefixCache, HybridStrategy):
    name = "hybrid-prefix"
    counts_prompt_blocks = False

    def __init__(self, num_slots: int, max_model_len: int, namespace: str = "",
                 kv_offload_blocks: int = 0, kv_offload_policy: str = "lru",
                 **hybrid: Any) -> None:
        """`hybrid`: `HybridStrategy`'s keyword arguments (`HybridPrefixOptions`)."""
        super().__init__(num_slots, max_model_len, **hybrid)
        # A host tier holds pool pages keyed by (hash, group): every group's named blocks
        # are stored; a GPU hit goes on while every group's next block is there.
        self._init_cache(namespace, kv_offload_blocks, kv_offload_policy, self.state_blocks)
        self._named: dict[int, int] = {}  # seq_id -> full blocks registered so far
        self._offered: dict[int, int] = {}  # seq_id -> blocks offered to the host tier

    # Names ------------------------------------------------------------------------------

    def _key(self, h: BlockHash, group: int) -> BlockHash:
        return h + bytes((group,))

    def _full_blocks(self, seq: Sequence, done: dict[int, int], end: int
                     ) -> Iterator[tuple[int, list[int], list[BlockHash]]]:
        """Per group, the held blocks and keys of the sequence's full blocks below position
        `end` from `done[seq_id]` on (which moves to their end)."""
        tables = self.tables.get(seq.seq_id)
        full = min(end, len(seq.token_ids)) // self.block_size
        start = done.get(seq.seq_id, 0)
        if tables is None or full <= start:
            return
        done[seq.seq_id] = full
        chain = self._chain(seq)
        for g, table in enumerate(tables):
            index = [i for i in range(start, min(full, len(table))) if table[i] >= 0]
            yield g, [table[i] for i in index], [self._key(chain[i], g) for i in index]

    def _sync(self, seq: Sequence, end: int | None = None) -> None:
        """Name the blocks the sequence filled since the last call, in every group, or (at
        allocation) those it fills below position `end` in the step being scheduled: as vLLM
        caches a scheduled chunk's blocks, a sequence admitted later in the same step hits
        them (it reads them in the step that writes them, after their owner: every policy
        schedules in admission order)."""
        end = seq.num_computed if end is None else end
        for _, blocks, keys in self._full_blocks(seq, self._named, end):
            for block, key in zip(blocks, keys, strict=True):
                self.pool.register(block, key)

    def _offer_computed(self, seq: Sequence) -> None:
        """Offer the host tier every group's blocks the sequence computed since the last
        call (named earlier, when scheduled: stored only once written)."""
        for g, blocks, keys in self._full_blocks(seq, self._offered, seq.num_computed):
            if blocks:
                self.host_tier.offer(g, blocks, keys)

    def _sync_all(self) -> None:
        for seq in self.live.values():
            self._sync(seq)
            if self.host_tier is not None:
                self._offer_computed(seq)

    # Hits -------------------------------------------------------------------------------

    def _match(self, seq: Sequence) -> tuple[int, list[list[int]]]:
        """(hit blocks L, per group the cached block of each index from its first needed
        one to L, FREED before it)."""
        if seq.num_computed or seq.seq_id in self.tables or self.state_blocks:
            return 0, []  # (a hybrid's state: no checkpoint kept, `--mamba-cache-mode none`)
        chain = self._chain(seq)[: (len(seq.token_ids) - 1) // self.block_size]
        lookup = self.pool.lookup
        longest = len(chain)
        for g, window in enumerate(self.windows):
            if window is None:
                run = 0
                while run < longest and lookup(self._key(chain[run], g)) is not None:
                    run += 1
                longest = run
        # per window group, the cached run ending at each block: one pass each (the hit at L
        # needs blocks first_needed(L) .. L - 1 cached)
        ok = [True] * (longest + 1)
        cached_of: list[list[int | None]] = []
        for g, window in enumerate(self.windows):
            blocks = [lookup(self._key(chain[i], g)) for i in range(longest)]
            cached_of.append(blocks)
            if window is None:
                continue
            run = 0
            for hit in range(1, longest + 1):
                run = run + 1 if blocks[hit - 1] is not None else 0
                if run < hit - self._first_needed(window, hit * self.block_size):
                    ok[hit] = False
        hit = next((h for h in range(longest, 0, -1) if ok[h]), 0)
        gpu_hit = hit
        if self.host_tier is not None:  # on while every group's next block is in the host tier
            ready = self.host_tier.tier.ready
            while hit < len(chain) and all(ready(self._key(chain[hit], g)) is not None
                                           for g in range(self.num_groups)):
                hit += 1
        if not hit:
            return 0, []
        tables = []
        for g, window in enumerate(self.windows):
            start = self._first_needed(window, hit * self.block_size)
            tables.append([FREED] * start + cached_of[g][start:gpu_hit]
                          + [HOST] * (hit - max(start, gpu_hit)))
        return hit, tables

    def _blocks_to_revive(self, tables: list[list[int]]) -> int:
        refs = self.pool.ref_counts
        return sum(1 for t in tables for b in t if b >= 0 and refs[b] == 0)

    @staticmethod
    def _host_hits(tables: list[list[int]]) -> int:
        """Entries of a hit the host tier serves (fresh blocks, loaded)."""
        return sum(1 for t in tables for b in t if b == HOST)

    # CacheStrategy ----------------------------------------------------------------------

    def can_admit(self, seq: Sequence, num_running: int) -> bool:
        self._sync_all()
        hit, tables = self._match(seq)
        if not hit:
            return super().can_admit(seq, num_running)
        fresh = (self._admission_need(self.blocks_for(len(seq.token_ids)), hit)
                 + self._host_hits(tables))
        keep = self.watermark_blocks if num_running else 0
        return self.pool.num_free - self._blocks_to_revive(tables) - fresh >= keep

    def admit(self, seq: Sequence, max_new_tokens: int | None = None) -> int:
        self._sync_all()
        hit, hit_tables = self._match(seq)
        self.live[seq.seq_id] = seq
        self.query_tokens += seq.num_uncomputed
        if not hit:
            return super().admit(seq, max_new_tokens)  # (its `allocate` names the chunk)
        cached = hit * self.block_size
        end = cached + self._scheduled(seq, cached, max_new_tokens)
        fresh = self.num_groups * (self.blocks_for(end) - hit) + self._host_hits(hit_tables)
        if fresh > self.pool.num_free - self._blocks_to_revive(hit_tables):
            raise MemoryError(f"admit of sequence {seq.seq_id} without room; call can_admit first")
        sid = seq.seq_id
        self.tables[sid] = hit_tables
        self.first[sid] = [self._first_needed(w, hit * self.block_size) for w in self.windows]
        for g, table in enumerate(hit_tables):  # take the hits first: fresh blocks may evict
            log = self._group_logs[g]
            for i, block in enumerate(table):
                if block < 0:  # FREED, or HOST: taken below
                    continue
                if self.pool.ref_counts[block] > 0:
                    self._g_shared[g] += 1
                self.pool.touch([block])
                log.append((sid, i, block))
        if self.host_tier is not None:
            self._host_admit(seq, hit_tables)
        super().allocate(seq, end)  # `HybridStrategy`'s: the blocks after the hit (they fit)
        self._named[sid] = hit
        self._offered[sid] = hit  # (its hits: in the host tier already, or the GPU's)
        self.hit_tokens += cached
        if self.host_tier is None or sid not in self.host_tier.loading:
            self._sync(seq, end)
        # else it computes nothing before its load ends: its blocks are named when a step
        # schedules them (`allocate`), not now, or a later admission would hit unwritten KV
        return cached

    def _host_admit(self, seq: Sequence, tables: list[list[int]]) -> None:
        """Fresh blocks for the host tier's part of the hit, loaded; the sequence waits."""
        chain = self._chain(seq)
        host = self.host_tier
        loaded = 0
        for g, table in enumerate(tables):
            index = [i for i, b in enumerate(table) if b == HOST]
            if not index:
                continue
            keys = [self._key(chain[i], g) for i in index]
            host_blocks = host.tier.lookup(keys)
            log = self._group_logs[g]
            for i in index:
                table[i] = self.pool.allocate()
                log.append((seq.seq_id, i, table[i]))
            host.load(seq.seq_id, g, [table[i] for i in index], host_blocks, keys)
            loaded = max(loaded, len(index))
        host.hit_tokens += loaded * self.block_size  # (a full group loads all past the GPU's)

    @staticmethod
    def _scheduled(seq: Sequence, cached: int, max_new_tokens: int | None) -> int:
        """Tokens an admission computes now, `cached` of its uncomputed ones hit."""
        n = seq.num_uncomputed - cached
        return n if max_new_tokens is None or n <= max_new_tokens else max_new_tokens

    def allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        if seq.seq_id in self.tables:
            self._sync(seq)
            if self.host_tier is not None:
                self._offer_computed(seq)
        self.live[seq.seq_id] = seq
        if not super().allocate(seq, num_new_tokens):
            return False
        self._sync(seq, seq.num_computed + num_new_tokens)
        return True

    def free(self, seq: Sequence) -> None:
        host = self.host_tier
        if host is not None and seq.seq_id in host.loading:
            groups = [g for g, _, _ in host.loading[seq.seq_id]]
            for g, block in zip(groups, host.drop(seq.seq_id), strict=True):
                self.pool.acquire(block)  # held until the copy ends (a second holder)
                self._g_shared[g] += 1
        self._sync(seq)
        if host is not None:
            self._offer_computed(seq)
            self._offered.pop(seq.seq_id, None)
        self._chains.pop(seq.seq_id, None)
        self._named.pop(seq.seq_id, None)
        self.live.pop(seq.seq_id, None)
        super().free(seq)

    def fork(self, parent: Sequence, child: Sequence):
        copies = super().fork(parent, child)
        if copies is not None:
            self.live[child.seq_id] = child
        return copies

    def memory_split(self, running, head_waiting):
        split = super().memory_split(running, head_waiting)
        split.cached = self.pool.num_evictable * self.block_size
        return split

    def stats(self) -> dict[str, float]:
        return {
            "evictions": self.pool.evictions,
            "cache_hit_tokens": self.hit_tokens,
            "cache_query_tokens": self.query_tokens,
            "cache_hit_rate": self.hit_tokens / self.query_tokens if self.query_tokens else 0.0,
            "cached_blocks": self.pool.num_evictable,
            **(self.host_tier.stats() if self.host_tier is not None else {}),
        }
