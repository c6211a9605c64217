"""`prefix`: paged allocation plus block-level prefix sharing (vLLM's automatic prefix caching).

- A *full* block (all `block_size` slots computed) is named by a hash chained from its
  parent's and its token ids (`prefix_index.py`), in a namespace of model, dtype and KV-cache
  dtype; the strategy names the blocks sequences completed whenever it is called.
- Admission reuses the longest run of cached full blocks at the start of the sequence
  (reference count + 1) and allocates the rest, or the step's chunk of it (`admits_chunks`); `admit` returns the tokens served from cache,
  which the engine marks computed. A hit never covers the block holding the last token (the
  engine needs its logits).
- Freed named blocks stay as evictable cache (counted free, reported `cached`), revived by
  a later hit, evicted least recently used first; a table is released tail first, so a
  prefix outlives its continuations.
- Blocks not computed yet are shareable too (*pending*): as vLLM caches a chunk's full
  blocks when it is scheduled, a sequence admitted after one whose scheduled chunk computes
  the same prefix reuses its blocks. Its first step then reads blocks the
  owner writes in the same step, which works because the executor writes every layer's K/V
  for the whole step before that layer's attention reads any, and because every policy
  schedules in admission order (preemption takes the most recently admitted first).
  `build_layout` checks it and raises rather than let a sequence read KV nobody wrote.
- `fork` (parallel sampling) shares every block of the parent, the partial last one
  included; the first write into a block with more than one owner copies it (copy-on-write).
- With a host tier, `swap_out` (preemption by swap) keeps a victim's computed blocks, the
  partial last one included, pinned in the tier; its re-admission takes the GPU cache's hit
  as any admission does and loads the rest (the sequence waits as for a host hit), resuming
  with every token it had computed.

A state-space hybrid's sequence also holds `state_blocks` blocks for its recurrent state from
admission to finish (as `paged`). A prefix of it can be reused only where a copy of the state
after that prefix was kept, a *checkpoint* (`state_blocks` blocks named by the hash of the
block it ends, evictable like any cached block), so a hit is the longest cached run of blocks
cut back to its last checkpoint. Where checkpoints are taken is `mamba_cache_mode`, vLLM's:

- `none`: no checkpoint, so no hit (vLLM without prefix caching: a hit on the attention
  blocks alone is useless, the state cannot be restored);
- `align` (vLLM's default with prefix caching): the scheduler cuts a prompt chunk to a block
  boundary and to the prompt's last boundary before its last token (`prefill_chunk`, vLLM's
  `_mamba_block_aligned_split`); a checkpoint is the running state a step ended at, kept
  where the sequence's computed tokens end on a block boundary (a cut chunk's end, each
  boundary decode crosses), copied by the executor (`KVLayout.state_copies`), and released
  to the cache at once (vLLM's `MambaManager` keeps one running state block a request);
- `all`: at every block boundary, each held by the sequence until it finishes (vLLM's
  earlier mode: a state page for every block of the table), so it costs `state_blocks`
  blocks per block of context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbench.core.layout import KVLayout, SlotCopy
from kvbench.core.mamba_cache_mode import MAMBA_CACHE_MODES, WITH_PREFIX_CACHING
from kvbench.core.sequence import Sequence
from kvbench.errors import KvbenchInputError
from kvbench.strategies.base import MemorySplit
from kvbench.strategies.paged import PagedOptions, PagedStrategy
from kvbench.strategies.prefix_cache import PrefixCache
from kvbench.strategies.prefix_index import BlockHash, extend_chain, state_hash
from kvbench.strategies.registry import register_strategy
from kvbench.strategies.reuse_distance import ReuseDistance


@dataclass(frozen=True)
class PrefixOptions(PagedOptions):
    namespace: str = ""  # keys the hashes (model, dtypes): other configurations never match
    kv_offload_blocks: int = 0  # host tier blocks (`--kv-offload` in blocks); 0: none
    kv_offload_policy: str = "lru"  # the host tier's eviction: lru | arc
    state_blocks: int = 0  # blocks a sequence's recurrent state holds (a hybrid's)
    mamba_cache_mode: str = WITH_PREFIX_CACHING  # where a hybrid's state is checkpointed


@register_strategy(
    "prefix", "paged + block-level prefix caching (hash chain, LRU eviction, copy-on-write forks)",
    PrefixOptions,
)
class PrefixCachingStrategy(PrefixCache, PagedStrategy):
    name = "prefix"

    def __init__(self, num_slots: int, max_model_len: int, namespace: str = "",
                 kv_offload_blocks: int = 0, kv_offload_policy: str = "lru",
                 mamba_cache_mode: str = WITH_PREFIX_CACHING, **paged: Any) -> None:
        """`paged`: `PagedStrategy`'s keyword arguments (`PrefixOptions`)."""
        super().__init__(num_slots, max_model_len, **paged)
        if mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise KvbenchInputError(f"--mamba-cache-mode {mamba_cache_mode!r}: choose from "
                                    f"{', '.join(MAMBA_CACHE_MODES)}")
        self._init_cache(namespace, kv_offload_blocks, kv_offload_policy, self.state_blocks)
        self.mamba_cache_mode = mamba_cache_mode
        # `states[seq_id]` holds a sequence's state blocks: `state_blocks` (its running state)
        # in `none` and `align`; in `all`, `state_blocks` per block of its table from index
        # `_state_base[seq_id]` on (the blocks before it came from a hit), the last ones its
        # running state. `_state_held` counts them all.
        self._state_base: dict[int, int] = {}
        self._state_held = 0
        self.state_checkpoints = 0  # checkpoints taken (`none`: 0)
        # The state copies the next layout carries (`KVLayout.state_copies`), in order.
        self._state_copies: list[tuple[list[int], list[int]]] = []
        # Every block hash seen so far (prompts at admission, every block when named):
        # what an unbounded cache with a checkpoint at every block could have served, the
        # structural ceiling of the hit rate (`ceiling_tokens` over `query_tokens`).
        self._seen: set[BlockHash] = set()
        self.ceiling_tokens = 0
        self.hashes: dict[int, list[BlockHash]] = {}  # seq_id -> hash of each full block
        # Full blocks allocated to a sequence that has not computed them yet, shareable by later
        # admissions: hash -> (block, owner seq_id or -1 once the owner left, table index).
        self._pending: dict[BlockHash, tuple[int, int, int]] = {}
        self._pending_hash: dict[int, BlockHash] = {}  # block -> its pending hash
        # `align`: the checkpoints a chunk scheduled now ends on, kept once it is computed:
        # hash of the block it ends -> (seq_id, table index). vLLM names them at allocation,
        # and a hit ending on one waits for a later step (`_pending_checkpoint`).
        self._pending_states: dict[BlockHash, tuple[int, int]] = {}
        # `align`: each admitted sequence's `_junction`, found at its admission's lookup.
        self._junctions: dict[int, int] = {}
        # `_chains` holds the hashes of waiting sequences' full blocks, kept between
        # admission checks (a queue head is checked every step until it fits). Sequences
        # whose prompt is computed chunk by chunk: the blocks of it shared so far
        # (`_share_scheduled`); its chain stays in `_chains` until all are.
        self._shared_upto: dict[int, int] = {}
        self.hit_blocks = 0
        self.pending_hit_blocks = 0
        self.cow_copies = 0
        self.forks = 0
        # The lookups' and named blocks' reuse distances (`residency_books`); per sequence,
        # the blocks its admission's lookup used (its later named blocks are used then).
        self.reuse = ReuseDistance()
        self._looked: dict[int, int] = {}
        # Accounting of shared blocks (see `_shared_adjustment`): who holds each block, at
        # which table index (the same in every holder's table), and the cached adjustment of
        # each shared block every holder has filled (valid until its holders change).
        self._holders: dict[int, dict[int, None]] = {}
        self._block_index: dict[int, int] = {}
        self._settled: dict[int, tuple[int, int, int, int]] = {}
        self._settled_sum = (0, 0, 0, 0)

    # Hash registration ------------------------------------------------------------------

    def _sync(self, seq: Sequence) -> None:
        """Name the sequence's blocks that became full since the last call."""
        table = self.tables.get(seq.seq_id)
        if table is None:
            return
        hashes = self.hashes[seq.seq_id]
        bs = self.block_size
        start = len(hashes)
        full = min(seq.num_computed, len(seq.token_ids), len(table) * bs) // bs
        if full <= start:
            return
        extend_chain(hashes, self._root, seq.token_ids, bs, full)
        for block, h in zip(table[start:full], hashes[start:full], strict=True):
            if self._pending_hash.get(block) == h:  # computed now: from pending to named
                del self._pending[h], self._pending_hash[block]
            self.pool.register(block, h)
        self._seen.update(hashes[start:full])
        if self.state_blocks and self.mamba_cache_mode != "none":
            self._checkpoint(seq, hashes, start, full)
        if self._pending_states:
            self._drop_pending_states(seq.seq_id, full)
        looked = max(start, self._looked.get(seq.seq_id, 0))
        if looked < full:
            self.reuse.use(hashes[looked:full])
        if self.host_tier is not None:  # every computed full block
            self.host_tier.offer(0, table[start:full], hashes[start:full])

    # A hybrid's state checkpoints --------------------------------------------------------

    def _drop_pending_states(self, seq_id: int, computed_blocks: int | None) -> None:
        """Forget the sequence's pending checkpoints below `computed_blocks` (computed now:
        kept or not, `_checkpoint`), all of them with None (it left)."""
        for h, (owner, index) in list(self._pending_states.items()):
            if owner == seq_id and (computed_blocks is None or index < computed_blocks):
                del self._pending_states[h]

    def _checkpoint(self, seq: Sequence, hashes: list[BlockHash], start: int, full: int) -> None:
        """Keep the state where blocks `start` to `full` - 1, just named, end: at each in
        `all` (the pages the sequence holds for them); in `align` (`mamba_cache_mode`) at the
        last one where the sequence's computed tokens end on it, a copy of its running state
        (`KVLayout.state_copies`)."""
        s = self.state_blocks
        if self.mamba_cache_mode == "all":
            base, pages = self._state_base[seq.seq_id], self.states[seq.seq_id]
            for i in range(max(start, base), full):
                for k, block in enumerate(pages[(i - base) * s: (i - base + 1) * s]):
                    self.pool.register(block, state_hash(hashes[i], k))
                self.state_checkpoints += 1
            return
        # Only the state the steps ended at exists to be copied: a boundary the last chunk
        # ended on (its running state, not yet advanced by the next step).
        running = self.states.get(seq.seq_id)
        if full * self.block_size != seq.num_computed or not running:
            return
        i = full - 1
        if self._has_checkpoint(hashes[i]) or self.pool.num_free < s:
            return  # kept already; or no room for a copy (none is taken)
        copy = [self.pool.allocate() for _ in range(s)]
        for k, block in enumerate(copy):
            self.pool.register(block, state_hash(hashes[i], k))
        self._state_copies.append((list(running[:s]), copy))
        for block in copy:  # to the cache at once: the sequence runs on its own state
            self.pool.release(block)
        self.state_checkpoints += 1

    def prefill_chunk(self, seq: Sequence, num_new_tokens: int,
                      max_num_batched_tokens: int | None = None) -> int:
        """`align` on a hybrid: vLLM's `Scheduler._mamba_block_aligned_split` (`_aligned`)."""
        if not self.state_blocks or self.mamba_cache_mode != "align":
            return num_new_tokens
        return self._aligned(seq, seq.num_computed, num_new_tokens, max_num_batched_tokens,
                             self._junctions.get(seq.seq_id, 0))

    def admission_chunk(self, seq: Sequence, num_new_tokens: int,
                        max_num_batched_tokens: int | None = None) -> int:
        if not self.state_blocks or self.mamba_cache_mode != "align":
            return num_new_tokens
        self._sync_all()
        cached = len(self._match(seq)[1]) * self.block_size
        n = min(num_new_tokens, seq.num_uncomputed - cached)
        junction = self._junction(seq, cached) if seq.seq_id not in self.tables else 0
        return self._aligned(seq, seq.num_computed + cached, n, max_num_batched_tokens, junction)

    def _aligned(self, seq: Sequence, start: int, n: int, max_chunk: int | None,
                 junction: int) -> int:
        """vLLM's `_mamba_block_aligned_split` (no speculative decoding, hash block = block)
        of a chunk of `n` tokens from `start`: so that the state a step ends at is one a
        checkpoint keeps, a chunk that does not end the prefill is cut back to a block
        boundary (to nothing where it starts in its block's first token and the block fits
        the token budget: it waits; a block larger than the budget is computed in pieces),
        and stops at the next boundary where it starts inside a block, at the last
        boundary before the sequence's last token and at the `junction` (`_junction`)."""
        bs = self.block_size
        total = len(seq.token_ids)
        prefill_end = max(seq.prompt_len, total - 1)  # a resumed sequence replays its output
        if start >= prefill_end:
            return n
        end = start + n
        if end < prefill_end:
            aligned = end // bs * bs
            if aligned > start or max_chunk is None or bs <= max_chunk:
                end = aligned
        stops = ((start // bs + 1) * bs if start % bs else 0, (total - 1) // bs * bs,
                 start + (junction - start) // bs * bs if start < junction < end else 0)
        end = min((s for s in stops if start < s < end), default=end)
        return max(end - start, 0)

    def _pending_checkpoint(self, hashes: list[BlockHash]) -> bool:
        """Whether a hit of these blocks ends on a checkpoint a chunk scheduled in this step
        keeps: not admitted in this step, as vLLM's `MambaManager.get_num_blocks_to_allocate`
        refuses a hit on a state block cached in the current step (the step computes it)."""
        return bool(self._pending_states and hashes and hashes[-1] in self._pending_states
                    and not self._has_checkpoint(hashes[-1]))

    def _has_checkpoint(self, h: BlockHash) -> bool:
        """Whether the state where the block of hash `h` ends is cached, every page of it."""
        return all(self.pool.lookup(state_hash(h, k)) is not None
                   for k in range(self.state_blocks))

    def _hit_state(self, hashes: list[BlockHash]) -> list[int]:
        """The pages of the checkpoint a hit of these blocks' hashes ends at (none without
        a hit or a state)."""
        if not self.state_blocks or not hashes:
            return []
        return [self.pool.lookup(state_hash(hashes[-1], k)) for k in range(self.state_blocks)]

    def _state_need(self, seq: Sequence, fresh: int) -> int:
        """State blocks an admission or a chunk of `fresh` new table blocks takes: `all`'s
        pages of each, else the running state at first admission."""
        if not self.state_blocks:
            return 0
        if self.mamba_cache_mode == "all":
            return fresh * self.state_blocks
        return 0 if seq.seq_id in self.states else self.state_blocks

    def _take_state(self, seq: Sequence, fresh: int, table_len: int) -> None:
        """Allocate `_state_need(seq, fresh)`: the table has `table_len` blocks before the
        `fresh` ones."""
        if not self.state_blocks:
            return
        need = self._state_need(seq, fresh)
        pages = self.states.setdefault(seq.seq_id, [])
        self._state_base.setdefault(seq.seq_id, table_len)
        pages.extend(self.pool.allocate() for _ in range(need))
        self._state_held += need

    def _drop_state(self, seq: Sequence) -> None:
        pages = self.states.pop(seq.seq_id, [])
        self._state_base.pop(seq.seq_id, None)
        self._state_held -= len(pages)
        for block in reversed(pages):  # (`all`: a named page stays as a checkpoint)
            self.pool.release(block)

    def _state_blocks_held(self) -> int:
        return self._state_held

    def _sync_all(self) -> None:
        for seq in self.live.values():
            self._sync(seq)

    def _match(self, seq: Sequence) -> tuple[list[int], list[BlockHash]]:
        """Cached blocks of the sequence's longest cached leading run, and their hashes
        (with a host tier: the hashes go on over the blocks the host tier holds after the
        GPU run).

        Stops before the block holding the last token, so at least one token is computed.
        """
        if seq.num_computed or seq.seq_id in self.tables:
            return [], []
        chain = self._chain(seq)
        limit = (len(seq.token_ids) - 1) // self.block_size
        blocks = self._attention_run(chain[:limit])
        if self.state_blocks:  # a hit ends where a state checkpoint is cached
            if self.mamba_cache_mode == "none":
                return [], []
            n = len(blocks)
            while (n and not self._has_checkpoint(chain[n - 1])
                   and chain[n - 1] not in self._pending_states):
                n -= 1
            del blocks[n:]
        host = self.host_tier.tier.lookup(chain[len(blocks):limit]) if self.host_tier else []
        return blocks, chain[: len(blocks) + len(host)]

    def _attention_run(self, chain: list[BlockHash]) -> list[int]:
        """The cached (or pending: scheduled now) blocks of the chain's leading run."""
        blocks: list[int] = []
        for h in chain:
            block = self.pool.lookup(h)
            if block is None and h in self._pending and self._pending[h][1] >= 0:
                block = self._pending[h][0]
            if block is None:
                break
            blocks.append(block)
        return blocks

    def _junction(self, seq: Sequence, hit_tokens: int) -> int:
        """Where the prompt's cached attention blocks end past its hit (0: they do not): a
        prefix other requests share whose state no checkpoint keeps yet. vLLM's lookup
        returns it (`shared_prefix_boundary`, the full-attention hit past the reconciled
        one) and `_mamba_block_aligned_split` stops a chunk there, so that one is kept."""
        limit = (len(seq.token_ids) - 1) // self.block_size
        run = len(self._attention_run(self._chain(seq)[:limit])) * self.block_size
        return run if run > hit_tokens else 0

    # CacheStrategy ----------------------------------------------------------------------

    def can_admit(self, seq: Sequence, num_running: int) -> bool:
        self._sync_all()
        host = self.host_tier
        if host is not None and seq.seq_id in host.swaps and not host.swap_ready(seq.seq_id):
            return False  # its swap-out is still being copied
        blocks, hashes = self._match(seq)
        if self._pending_checkpoint(hashes):
            return False
        revived = sum(1 for b in blocks + self._hit_state(hashes) if self.pool.ref_counts[b] == 0)
        needed = self._blocks_needed(seq, seq.num_uncomputed) - len(blocks)
        needed += self._state_need(seq, needed)
        keep = self.watermark_blocks if num_running else 0
        return self.pool.num_free - revived - needed >= keep

    def admit(self, seq: Sequence, max_new_tokens: int | None = None) -> int:
        self._sync_all()
        uncomputed = seq.num_uncomputed
        if seq.seq_id in self.tables:  # already holds memory: only grow
            n = uncomputed if max_new_tokens is None else min(uncomputed, max_new_tokens)
            if not self.allocate(seq, n):
                raise MemoryError(f"admit of sequence {seq.seq_id} without room")
            return 0
        blocks, hashes = self._match(seq)
        if not seq.num_computed:  # a lookup: every full block before the last token's
            looked = (len(seq.token_ids) - 1) // self.block_size
            chain = self._chain(seq)
            self.reuse.lookup(chain[:looked], uncomputed)
            self._looked[seq.seq_id] = looked
            seen = 0
            while seen < looked and chain[seen] in self._seen:
                seen += 1
            self.ceiling_tokens += seen * self.block_size
            self._seen.update(chain)
        cached = len(hashes) * self.block_size  # GPU hits, then the host tier's
        swap = self.host_tier.swaps.get(seq.seq_id) if self.host_tier is not None else None
        hit_tokens = cached
        if swap is not None and swap.partial >= 0 and len(hashes) == swap.tokens // self.block_size:
            cached = swap.tokens  # and its partial last block, swapped out with it
        n = uncomputed - cached
        if max_new_tokens is not None and max_new_tokens < n:
            n = max_new_tokens
        copied = self._hit_state(hashes)  # the checkpoint the state is copied from
        revived = sum(1 for b in blocks + copied if self.pool.ref_counts[b] == 0)
        needed = self.blocks_for(seq.num_computed + cached + n) - len(blocks)
        if needed + self._state_need(seq, needed) > self.pool.num_free - revived:
            raise MemoryError(f"admit of sequence {seq.seq_id} without room; call can_admit first")
        self.pending_hit_blocks += sum(1 for b in blocks if b in self._pending_hash)
        self.pool.touch(blocks + copied)  # take the hits first: fresh allocations may evict
        table = self.tables[seq.seq_id] = []
        self._extend_table(seq, table, blocks + [self.pool.allocate() for _ in range(needed)])
        self._take_state(seq, needed, len(blocks))
        if copied:
            self._state_copies.append((copied, list(self.states[seq.seq_id][: len(copied)])))
        for block in copied:  # copied into the sequence's own state: back to the cache
            self.pool.release(block)
        if self.host_tier is not None:
            self._host_admit(seq, table, blocks, hashes)
            if swap is not None:
                self._swap_in(seq, table, len(blocks), len(hashes), cached > hit_tokens)
                if cached > hit_tokens and seq.seq_id in self._chains:
                    # its partial block is loaded, not shareable while pending: nobody else
                    # may read it before the load has ended and it has computed the rest
                    self._shared_upto[seq.seq_id] = len(hashes) + 1
        self.hashes[seq.seq_id] = hashes
        self.live[seq.seq_id] = seq
        if self.state_blocks and self.mamba_cache_mode == "align":
            self._junctions[seq.seq_id] = self._junction(seq, cached)
        if seq.seq_id in self._chains:
            self._share_scheduled(seq, table, seq.num_computed + cached + n)
        self.hit_blocks += len(blocks)
        self.hit_tokens += hit_tokens  # both tiers' (`host_hit_tokens`: the host tier's)
        self.query_tokens += seq.num_uncomputed
        return cached

    def swap_out(self, seq: Sequence) -> bool:
        host = self.host_tier
        table = self.tables.get(seq.seq_id)
        if host is None or not table or not seq.num_computed:
            return False  # nothing computed, nothing to keep: a plain preemption
        if seq.seq_id in host.loading:  # its KV is not all on the GPU yet
            host.swap_fallbacks += 1
            return False
        self._sync(seq)
        tokens = min(seq.num_computed, len(seq.token_ids))
        full = tokens // self.block_size
        if not host.swap_out(seq.seq_id, 0, table[: self.blocks_for(tokens)],
                             self.hashes[seq.seq_id][:full], tokens):
            return False
        self.free(seq)  # (the copies read its blocks before the next forward writes any)
        return True

    def _swap_in(self, seq: Sequence, table: list[int], gpu_hits: int, hits: int,
                 partial: bool) -> None:
        """A swapped-out sequence admitted again: its host blocks after the GPU hit were
        loaded as a host hit (`_host_admit`); load its partial last block too, and let the
        pins go."""
        host = self.host_tier
        swap = host.swaps[seq.seq_id]
        if partial:
            host.load(seq.seq_id, 0, [table[hits]], [swap.partial], [None], hit=False)
        host.swap_in(seq.seq_id, hits - gpu_hits + partial)

    def _host_admit(self, seq: Sequence, table: list[int], gpu_hits: list[int],
                    hashes: list[BlockHash]) -> None:
        """Offer the GPU hit's blocks (vLLM offers a request's every full block), and load
        the host tier's hit into the fresh blocks after it: the sequence waits for them."""
        host = self.host_tier
        loaded = hashes[len(gpu_hits):]
        if loaded:  # first: a load's host blocks cannot be evicted by the offer below
            host_blocks = host.tier.lookup(loaded)
            host.load(seq.seq_id, 0, table[len(gpu_hits): len(hashes)], host_blocks, loaded)
            host.hit_tokens += len(loaded) * self.block_size
        computed = [i for i, b in enumerate(gpu_hits) if b not in self._pending_hash]
        if computed:  # (a pending block is not written yet: its owner offers it when it is)
            host.offer(0, [gpu_hits[i] for i in computed], [hashes[i] for i in computed])

    def allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        sid = seq.seq_id
        table = self.tables.get(sid)
        computed = seq.num_computed
        bs = self.block_size
        if (  # the common decode case, inline: room in the last block, nothing to name
            table
            and len(table) * bs >= computed + num_new_tokens
            and computed // bs <= len(self.hashes[sid])
            and sid not in self._chains  # (a chunk of a prompt: its blocks to share)
        ):
            if not self.pool.num_shared:
                return True
            refs = self.pool.ref_counts  # nothing to copy: no written block has two holders
            if all(refs[table[i]] < 2 for i in range(computed // bs,
                                                      -(-(computed + num_new_tokens) // bs))):
                return True
        if table is None:
            table = self.tables[sid] = []
            self.hashes[sid] = []
            self.live[sid] = seq
        if min(computed, len(seq.token_ids)) // bs > len(self.hashes[sid]):
            self._sync(seq)  # a block became full since the last call: name it
        end = -(-(computed + num_new_tokens) // bs)
        fresh = max(0, end - len(table))
        if not self.pool.num_shared:  # the common case: no block has two owners
            shared: list[int] = []
        else:
            shared = [i for i in range(computed // bs, min(end, len(table)))
                      if self.pool.ref_counts[table[i]] > 1
                      and not self._owns_pending(seq, table[i])]
        if fresh + len(shared) + self._state_need(seq, fresh) > self.pool.num_free:
            return False
        for i in shared:  # copy-on-write: this sequence writes into a block others read
            old, new = table[i], self.pool.allocate()
            self._copies.append(SlotCopy(old * bs, new * bs, bs))
            self._replace_block(seq, table, i, new)
            self.pool.release(old)
            self.cow_copies += 1
        if fresh:
            self._take_state(seq, fresh, len(table))
            self._extend_table(seq, table, [self.pool.allocate() for _ in range(fresh)])
        elif sid not in self.states:
            self._take_state(seq, 0, len(table))
        if sid in self._chains:
            self._share_scheduled(seq, table, computed + num_new_tokens)
        return True

    def _share_scheduled(self, seq: Sequence, table: list[int], end: int) -> None:
        """Make the full blocks of the sequence's prompt (tokens it had when admitted) below
        position `end`, scheduled now, shareable by later admissions (vLLM caches a
        scheduled chunk's blocks at allocation): pending until computed."""
        chain = self._chains[seq.seq_id]
        start = self._shared_upto.get(seq.seq_id, len(self.hashes[seq.seq_id]))
        stop = min(end // self.block_size, len(chain))
        if (self.state_blocks and self.mamba_cache_mode == "align" and stop
                and end == stop * self.block_size and not self._has_checkpoint(chain[stop - 1])):
            self._pending_states[chain[stop - 1]] = (seq.seq_id, stop - 1)
        for i in range(start, stop):
            h = chain[i]
            if h not in self._pending and self.pool.lookup(h) is None:
                self._pending[h] = (table[i], seq.seq_id, i)
                self._pending_hash[table[i]] = h
        if stop >= len(chain):  # every full block of its admission's tokens is shared
            del self._chains[seq.seq_id]
            self._shared_upto.pop(seq.seq_id, None)
        else:
            self._shared_upto[seq.seq_id] = max(start, stop)

    def _owns_pending(self, seq: Sequence, block: int) -> bool:
        """Whether `block` is pending and `seq` is the one to compute it (others share it
        for exactly that content: writing it is no reason to copy)."""
        h = self._pending_hash.get(block)
        return h is not None and self._pending[h][1] == seq.seq_id

    def free(self, seq: Sequence) -> None:
        if self.host_tier is not None and seq.seq_id in self.host_tier.loading:
            # freed while its blocks load: not named, and held until the copies end
            for block in self.host_tier.drop(seq.seq_id):
                self.pool.acquire(block)
        self._sync(seq)
        if self._pending_states:
            self._drop_pending_states(seq.seq_id, None)
        self._junctions.pop(seq.seq_id, None)
        self._looked.pop(seq.seq_id, None)
        self._chains.pop(seq.seq_id, None)
        self._shared_upto.pop(seq.seq_id, None)
        table = self._drop_table(seq)
        self.hashes.pop(seq.seq_id, None)
        self.live.pop(seq.seq_id, None)
        for block in reversed(table):  # tail first: it is evicted before its prefix
            self.pool.release(block)
        if self.state_blocks:
            self._drop_state(seq)
        if self._pending:
            for block in table:
                h = self._pending_hash.get(block)
                if h is None:
                    continue
                if self.pool.ref_counts[block] == 0:  # nobody holds it any more
                    del self._pending[h], self._pending_hash[block]
                elif self._pending[h][1] == seq.seq_id:  # orphaned: its sharers must not run
                    self._pending[h] = (block, -1, self._pending[h][2])

    def fork(self, parent: Sequence, child: Sequence) -> list[SlotCopy] | None:
        """The child shares every block of the parent (the partial last one too): no copy."""
        self._sync(parent)
        table = list(self.tables[parent.seq_id])
        if self.state_blocks:  # the child's own running state (a copy of the parent's)
            if self.state_blocks > self.pool.num_free:
                return None
            self.states[child.seq_id] = [self.pool.allocate() for _ in range(self.state_blocks)]
            s = self.state_blocks  # (`all`: the parent's running state is its last pages)
            self._state_copies.append((self.states[parent.seq_id][-s:],
                                       list(self.states[child.seq_id])))
            self._state_base[child.seq_id] = max(len(table) - 1, 0)
            self._state_held += self.state_blocks
        for block in table:
            self.pool.share(block)
        self.tables[child.seq_id] = []
        self._extend_table(child, self.tables[child.seq_id], table)
        self.hashes[child.seq_id] = list(self.hashes[parent.seq_id])
        self.live[child.seq_id] = child
        self.forks += 1
        return []

    def build_layout(self, scheduled: list[tuple[Sequence, int]]) -> KVLayout:
        if self._pending:
            self._check_pending(scheduled)
        layout = super().build_layout(scheduled)
        if self._state_copies:
            layout.state_copies, self._state_copies = self._state_copies, []
        return layout

    def _check_pending(self, scheduled: list[tuple[Sequence, int]]) -> None:
        """A sequence may read a pending block only in a step that writes it."""
        bs = self.block_size
        end = {seq.seq_id: seq.num_computed + n for seq, n in scheduled}
        for seq, _ in scheduled:
            table = self.tables[seq.seq_id]
            for block in table[: self.blocks_for(seq.num_computed)]:
                h = self._pending_hash.get(block)
                if h is None:
                    continue
                _, owner, index = self._pending[h]
                if owner == seq.seq_id:
                    continue
                owner_seq = self.live.get(owner)
                done = owner_seq.num_computed if owner_seq is not None else -1
                if max(done, end.get(owner, -1)) < (index + 1) * bs:
                    raise RuntimeError(
                        f"prefix cache: sequence {seq.seq_id} would read block {block} before "
                        f"sequence {owner} computes it (the batching policy must schedule "
                        "sequences in admission order)"
                    )

    # Shared-block accounting ------------------------------------------------------------

    def _extend_table(self, seq: Sequence, table: list[int], blocks: list[int]) -> None:
        start = len(table)
        super()._extend_table(seq, table, blocks)
        for i, block in enumerate(blocks, start=start):
            self._hold_block(block, seq.seq_id, i)

    def _replace_block(self, seq: Sequence, table: list[int], index: int, block: int) -> None:
        old = table[index]
        super()._replace_block(seq, table, index, block)
        self._unhold_block(old, seq.seq_id)
        self._hold_block(block, seq.seq_id, index)

    def _drop_table(self, seq: Sequence) -> list[int]:
        table = super()._drop_table(seq)
        for block in table:
            self._unhold_block(block, seq.seq_id)
        return table

    def _hold_block(self, block: int, seq_id: int, index: int) -> None:
        self._holders.setdefault(block, {})[seq_id] = None
        self._block_index[block] = index
        self._unsettle(block)

    def _unhold_block(self, block: int, seq_id: int) -> None:
        holders = self._holders[block]
        del holders[seq_id]
        if not holders:
            del self._holders[block], self._block_index[block]
        self._unsettle(block)

    def _unsettle(self, block: int) -> None:
        adj = self._settled.pop(block, None)
        if adj is not None:
            self._settled_sum = tuple(a - b for a, b in zip(self._settled_sum, adj, strict=True))

    def _block_adjustment(self, block: int) -> tuple[tuple[int, int, int, int], bool]:
        """What counting a shared block once changes in the per-sequence totals (token,
        reserved, internal, prompt blocks), and whether every holder has filled it.

        The block's slots follow its furthest holder: all token slots once one holder has
        filled it, else the largest filled and to-be-used counts among its holders.
        """
        bs = self.block_size
        i = self._block_index[block]
        start = i * bs
        counted = [0, 0, 0]  # what the per-sequence totals hold for this block
        filled_by = 0
        max_filled = max_will = 0
        in_prompt = 0
        for seq_id in self._holders[block]:
            seq = self.live[seq_id]
            filled = min(max(seq.num_computed - start, 0), bs)
            will = min(max(max(seq.final_kv_len, seq.num_computed) - start, filled), bs)
            counted[0] += filled
            counted[1] += will - filled
            counted[2] += bs - will
            filled_by += filled == bs
            max_filled, max_will = max(max_filled, filled), max(max_will, will)
            in_prompt += i < self.blocks_for(seq.prompt_len)
        once = (bs, 0, 0) if filled_by else (max_filled, max_will - max_filled, bs - max_will)
        adj = (once[0] - counted[0], once[1] - counted[1], once[2] - counted[2],
               min(in_prompt, 1) - in_prompt)
        return adj, filled_by == len(self._holders[block])

    def _shared_adjustment(self) -> tuple[int, int, int, int]:
        """The adjustment of all shared blocks: cached for those every holder has filled
        (their holders only grow past them), recomputed for the few others."""
        total = list(self._settled_sum)
        for block in self.pool.shared:
            if block in self._settled:
                continue
            adj, settled = self._block_adjustment(block)
            if settled:
                self._settled[block] = adj
                self._settled_sum = tuple(a + b for a, b in zip(self._settled_sum, adj,
                                                                strict=True))
            for k in range(4):
                total[k] += adj[k]
        return total[0], total[1], total[2], total[3]

    def _split_from_totals(
        self, running: list[Sequence], head_waiting: Sequence | None
    ) -> MemorySplit:
        split = super()._split_from_totals(running, head_waiting)
        if self.pool.num_shared:
            token, reserved, internal, prompt = self._shared_adjustment()
            split.token += token
            split.reserved += reserved
            split.internal += internal
            split.prompt_blocks += prompt
            split.free = self.num_slots - split.held
        split.cached = self.pool.num_evictable * self.block_size
        return split

    def memory_split_from_scratch(
        self, running: list[Sequence], head_waiting: Sequence | None
    ) -> MemorySplit:
        """Each physical block counted once: a shared block's token/reserved/internal slots
        follow the furthest filled (and furthest to-be-used) position among its owners."""
        split = MemorySplit()
        bs = self.block_size
        refs = self.pool.ref_counts
        prompt_blocks: set[int] = set()
        full_shared: set[int] = set()  # shared blocks some owner has filled: all token slots
        partial: list[tuple[Sequence, int, int]] = []  # other shared blocks: (owner, index, block)
        for seq in running:
            table = self.tables.get(seq.seq_id)
            if not table:
                continue
            prompt_blocks.update(table[: self.blocks_for(seq.prompt_len)])
            split.add_held(len(table) * bs, seq.num_computed, seq.final_kv_len)
            filled_blocks = min(seq.num_computed // bs, len(table))
            shared = [b for b in table[:filled_blocks] if refs[b] > 1]
            if shared:  # counted whole for this owner: take them out, add each block once
                split.token -= len(shared) * bs
                full_shared.update(shared)
            partial.extend((seq, i, table[i]) for i in range(filled_blocks, len(table))
                           if refs[table[i]] > 1)
        split.token += len(full_shared) * bs
        merged: dict[int, tuple[int, int]] = {}  # block -> (filled, will use), max over owners
        for seq, i, block in partial:
            filled = min(max(seq.num_computed - i * bs, 0), bs)
            will = min(max(max(seq.final_kv_len, seq.num_computed) - i * bs, filled), bs)
            split.token -= filled
            split.reserved -= will - filled
            split.internal -= bs - will
            if block not in full_shared:
                old = merged.get(block, (0, 0))
                merged[block] = (max(old[0], filled), max(old[1], will))
        for filled, will in merged.values():
            split.token += filled
            split.reserved += will - filled
            split.internal += bs - will
        split.internal += self._state_held * bs  # held, holding no token
        split.cached = self.pool.num_evictable * bs
        split.free = self.num_slots - split.held
        split.prompt_blocks = len(prompt_blocks)
        return split

    def is_whole(self) -> bool:
        return (super().is_whole() and not self.live and not self._pending
                and not self._pending_states and not self._state_held)

    def reset_stats(self) -> None:
        super().reset_stats()
        self.hit_blocks = self.pending_hit_blocks = self.cow_copies = self.forks = 0
        self.ceiling_tokens = self.state_checkpoints = 0

    def stats(self) -> dict[str, float]:
        return {
            "evictions": self.pool.evictions,
            "cache_hits_blocks": self.hit_blocks,
            "pending_hits_blocks": self.pending_hit_blocks,
            "cache_hit_tokens": self.hit_tokens,
            "cache_query_tokens": self.query_tokens,
            "cache_hit_rate": self.hit_tokens / self.query_tokens if self.query_tokens else 0.0,
            # the best hit rate the block layout allows (`_seen`), and its tokens
            "cache_ceiling_tokens": self.ceiling_tokens,
            "cache_hit_ceiling": (self.ceiling_tokens / self.query_tokens
                                  if self.query_tokens else 0.0),
            "cached_blocks": self.pool.num_evictable,
            "cow_copies": self.cow_copies,
            "forks": self.forks,
            **({"state_checkpoints": self.state_checkpoints} if self.state_blocks else {}),
            **(self.host_tier.stats() if self.host_tier is not None else {}),
        }
