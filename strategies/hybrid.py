"""`hybrid`: paged allocation with one block table per allocation group (vLLM's hybrid KV
cache manager).

The layers are split into allocation groups of equal layer count (`kvbench.core.kv_allocation`),
each with its own block table per sequence, all drawing from one pool of equal pages. A
full-attention group grows as `paged` does. A sliding-window group of window W frees every
block wholly before the window of the next query: a query at p reads keys from p - W + 1 on,
so before computing from p the group releases its blocks below `(p - W + 1) // block_size`
(vLLM's `SlidingWindowManager.remove_skipped_blocks`); a decoding sequence holds at most
ceil(W / block_size) + 1 blocks there. Blocks are taken for the tokens a step computes (a
prefill chunk), after freeing behind the window; admission checks that the whole sequence
would fit, a window group's need capped at what it holds at most (`admission_caps`), as
vLLM's `allocate_slots` does. A freed entry stays in the executor's table with its old block
id: the kernels read only the window's blocks.

The memory split counts pool slots (one token of one allocation group); `MemorySplit.groups`
holds each group's part (free slots are the pool's, in the total only), a window group's
token slots being the computed positions in the blocks it still holds.

A state-space hybrid's sequence also holds `state_blocks` pages of the same pool from its
admission to its finish, whatever its length (vLLM's state groups, one page each, in the
pool of equal pages: the attention block raised to match, `kvbench.sizing.state_pages`);
they count as held without tokens (the whole split's `internal`, in no group's split).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbench.core.block_size import DEFAULT_BLOCK_SIZE
from kvbench.core.layout import DROP_TABLE, KVLayout, SlotCopy
from kvbench.core.sequence import Sequence
from kvbench.strategies.base import CacheStrategy, MemorySplit
from kvbench.strategies.block_pool import BlockPool
from kvbench.strategies.paged import PagedOptions
from kvbench.strategies.registry import register_strategy

FREED = -1  # a table entry whose block went back to the pool (before the window)


@dataclass(frozen=True)
class HybridOptions(PagedOptions):
    # One entry per allocation group: its window (None: full attention). The engine build
    # fills it from the model (`kvbench.core.kv_allocation`).
    allocation_windows: tuple[int | None, ...] = (None,)
    # Tokens one step computes at most (the scheduler's budget): with the window, what a
    # window group holds of a sequence at most, hence its admission cap.
    max_num_batched_tokens: int = 2048
    # Steps scheduled but not yet settled: 2 under async scheduling, whose next step is
    # scheduled before the blocks behind the window are freed (vLLM's max_in_flight_tokens).
    concurrent_batches: int = 1
    state_blocks: int = 0  # pages a sequence's recurrent state holds (a hybrid's)


@register_strategy(
    "hybrid", "paged with a block table per layer group; sliding-window groups free blocks "
    "behind the window (vLLM's hybrid KV cache manager)", HybridOptions,
)
class HybridStrategy(CacheStrategy):
    name = "hybrid"
    layout_kind = "paged"
    counts_prompt_blocks = True  # distinct blocks holding prompt positions, in the split
    admits_chunks = True  # memory per scheduled chunk (`CacheStrategy.admit`)
    reads_no_token_ids = True  # lengths only, never ids (`declares`)

    def __init__(
        self,
        num_slots: int,
        max_model_len: int,
        block_size: int = DEFAULT_BLOCK_SIZE,
        watermark: float = 0.01,
        allocation_windows: tuple[int | None, ...] = (None,),
        max_num_batched_tokens: int = 2048,
        concurrent_batches: int = 1,
        check_accounting: bool | None = None,
        state_blocks: int = 0,
    ) -> None:
        super().__init__(num_slots, max_model_len, check_accounting)
        # Each admitted sequence's state pages, by seq_id (none without recurrent layers).
        self.state_blocks = state_blocks
        self.states: dict[int, list[int]] = {}
        if not allocation_windows:
            raise ValueError("hybrid needs at least one allocation group")
        self.block_size = block_size
        self.table_block_size = block_size
        self.windows = tuple(allocation_windows)
        self.num_groups = len(self.windows)
        self.pool = BlockPool(num_slots // block_size)
        # Free blocks kept back at admission so running sequences can grow: vLLM v1's
        # rounding (`KVCacheManager`: int(watermark x its blocks), its null block counted).
        self.watermark_blocks = int(watermark * (self.pool.num_blocks + 1))
        # Per group, the most blocks admission asks of it for one sequence (None: no cap).
        # A window group frees behind the window before each chunk, so it holds at most the
        # W - 1 positions before a chunk and the chunk, one block more for the window's
        # start inside a block (vLLM's `SlidingWindowSpec.max_admission_blocks_per_request`).
        self.admission_caps = tuple(
            None if w is None
            else -(-min(w - 1 + concurrent_batches * max_num_batched_tokens, max_model_len)
                   // block_size) + 1
            for w in self.windows)
        # seq_id -> per group: its table (FREED before the window) and its first held index
        self.tables: dict[int, list[list[int]]] = {}
        self.first: dict[int, list[int]] = {}
        # seq_id -> (tokens that fit without a new block, first position that frees one)
        self._room: dict[int, tuple[int, int]] = {}
        self._group_logs = [[] for _ in self.windows]
        # Running totals per group, in slots: held, will use, skipped (freed before the window)
        self._g_held = [0] * self.num_groups
        self._g_will = [0] * self.num_groups
        self._g_skipped = [0] * self.num_groups
        self._g_prompt = [0] * self.num_groups
        # References beyond the first to held blocks, per group (prefix hits share full,
        # computed blocks: each is held once, not once per holder)
        self._g_shared = [0] * self.num_groups
        self._books: dict[int, list[tuple[int, int, int, int]]] = {}

    # Sizes ------------------------------------------------------------------------------

    @property
    def capacity_slots(self) -> int:
        """Pool slots: one slot is one token of one allocation group."""
        return self.pool.num_blocks * self.block_size

    @property
    def capacity_tokens(self) -> int:
        """Tokens of context the pool holds for one decoding sequence: its window groups'
        ceil(W / block) + 1 blocks each taken out, the rest shared by the full-attention
        groups (each further sequence takes its own window blocks out too)."""
        bs = self.block_size
        window_slots = sum((-(-w // bs) + 1) * bs for w in self.windows if w is not None)
        num_full = sum(1 for w in self.windows if w is None)
        if not num_full:
            return self.capacity_slots
        return max(0, self.capacity_slots - window_slots) // num_full

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _first_needed(self, window: int | None, position: int) -> int:
        """First block index a query at `position` reads in a group of `window`."""
        if window is None or position < window:
            return 0
        return (position - window + 1) // self.block_size

    def required_slots(self, seq: Sequence) -> int:
        """What admission asks for the final length (a sequence preempted late is admitted
        again with all its tokens): a full-attention group's blocks for all of them, a
        window group's up to its cap (`_admission_need`)."""
        return self._admission_need(self.blocks_for(seq.final_kv_len), 0) * self.block_size

    def _admission_need(self, blocks: int, hit: int) -> int:
        """Blocks admission asks for a sequence of `blocks` blocks, `hit` of them cached
        (vLLM's `allocate_slots` with `full_sequence_must_fit`, its default): each group's
        blocks, a window group's capped, less the hits."""
        need = 0
        for cap in self.admission_caps:
            need += max(0, (blocks if cap is None or blocks < cap else cap) - hit)
        return need

    def _blocks_needed(self, tables: list[list[int]], p: int, num_new_tokens: int) -> int:
        """Blocks to allocate to compute `num_new_tokens` from position `p`, once the blocks
        behind the window are freed (a window group takes none for positions no query reads)."""
        end = self.blocks_for(p + num_new_tokens)
        return sum(max(0, end - max(len(table), self._first_needed(window, p)))
                   for table, window in zip(tables, self.windows, strict=True))

    # CacheStrategy ----------------------------------------------------------------------

    def can_admit(self, seq: Sequence, num_running: int) -> bool:
        """Whether the whole sequence would fit (its blocks taken chunk by chunk later)."""
        needed = self._admission_need(self.blocks_for(seq.num_computed + seq.num_uncomputed), 0)
        needed += self._state_need(seq)
        keep = self.watermark_blocks if num_running else 0
        return self.pool.num_free - needed >= keep

    def admit(self, seq: Sequence, max_new_tokens: int | None = None) -> int:
        n = seq.num_uncomputed
        if not self.allocate(seq, n if max_new_tokens is None else min(n, max_new_tokens)):
            raise MemoryError(f"admit of sequence {seq.seq_id} without room; call can_admit first")
        return 0

    def allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        sid = seq.seq_id
        p = seq.num_computed
        room = self._room.get(sid)
        if room is not None and p + num_new_tokens <= room[0] and p < room[1]:
            return True
        tables = self.tables.get(sid)
        if tables is None:
            tables = self.tables[sid] = [[] for _ in self.windows]
            self.first[sid] = [0] * self.num_groups
        self._free_behind(seq, tables, p)  # blocks no later query reads: always safe to free
        needed = self._blocks_needed(tables, p, num_new_tokens)
        if needed + self._state_need(seq) > self.pool.num_free:
            self._set_room(seq)
            return False
        if self._state_need(seq):
            self.states[sid] = [self.pool.allocate() for _ in range(self.state_blocks)]
        end = self.blocks_for(p + num_new_tokens)
        firsts = self.first[sid]
        for g, table in enumerate(tables):
            start = max(len(table), firsts[g])
            if start > len(table):  # entries before the window that were never taken
                table.extend([FREED] * (start - len(table)))
            log = self._group_logs[g]
            for i in range(start, end):
                block = self.pool.allocate()
                table.append(block)
                log.append((sid, i, block))
        self._account_seq(seq)
        self._set_room(seq)
        return True

    def _state_need(self, seq: Sequence) -> int:
        """The state pages a sequence takes at its first allocation."""
        return self.state_blocks if self.state_blocks and seq.seq_id not in self.states else 0

    def _free_behind(self, seq: Sequence, tables: list[list[int]], position: int) -> None:
        firsts = self.first[seq.seq_id]
        changed = False
        for g, window in enumerate(self.windows):
            if window is None:
                continue
            need_from = self._first_needed(window, position)
            if need_from <= firsts[g]:
                continue
            table = tables[g]
            for i in range(firsts[g], min(need_from, len(table))):
                if table[i] != FREED:
                    self._release(g, table[i])
                    table[i] = FREED
            firsts[g] = need_from
            changed = True
        if changed:
            self._account_seq(seq)

    def _set_room(self, seq: Sequence) -> None:
        """When `allocate` next has work for `seq`: a new block, or a block to free."""
        sid = seq.seq_id
        tables, firsts = self.tables[sid], self.first[sid]
        bs = self.block_size
        fits = min(len(t) for t in tables) * bs
        frees_at = self.max_model_len + 1
        for g, window in enumerate(self.windows):
            if window is not None:  # the position whose window starts past block firsts[g]
                frees_at = min(frees_at, (firsts[g] + 1) * bs + window - 1)
        self._room[sid] = (fits, frees_at)

    def free(self, seq: Sequence) -> None:
        sid = seq.seq_id
        tables = self.tables.pop(sid, None)
        self.first.pop(sid, None)
        self._room.pop(sid, None)
        for block in self.states.pop(sid, ()):
            self.pool.release(block)
        if tables is None:
            return
        for g, table in enumerate(tables):
            for block in reversed(table):  # tail first: a cached prefix outlives its tail
                if block != FREED:
                    self._release(g, block)
            self._group_logs[g].append((sid, DROP_TABLE, 0))
        self._unaccount(sid)

    def _release(self, group: int, block: int) -> None:
        if self.pool.ref_counts[block] > 1:
            self._g_shared[group] -= 1
        self.pool.release(block)

    def fork(self, parent: Sequence, child: Sequence) -> list[SlotCopy] | None:
        """Like `paged`: the child gets its own copy of every block the parent holds."""
        parent_tables = self.tables[parent.seq_id]
        held = [[b for b in t if b != FREED] for t in parent_tables]
        if sum(len(h) for h in held) + self.state_blocks > self.pool.num_free:
            return None
        if self.state_blocks:  # the child's own state (a copy of the parent's)
            self.states[child.seq_id] = [self.pool.allocate() for _ in range(self.state_blocks)]
        bs = self.block_size
        tables = self.tables[child.seq_id] = []
        self.first[child.seq_id] = list(self.first[parent.seq_id])
        copies: list[SlotCopy] = []
        for g, parent_table in enumerate(parent_tables):
            table: list[int] = []
            for i, src in enumerate(parent_table):
                if src == FREED:
                    table.append(FREED)
                    continue
                dst = self.pool.allocate()
                table.append(dst)
                self._group_logs[g].append((child.seq_id, i, dst))
                copies.append(SlotCopy(src * bs, dst * bs, bs))
            tables.append(table)
        if self.state_blocks:  # the state's bytes live in its pages' slots
            copies.extend(SlotCopy(src * bs, dst * bs, bs) for src, dst in zip(
                self.states[parent.seq_id], self.states[child.seq_id], strict=True))
        self._account_seq(child)
        self._set_room(child)
        self._copies.extend(copies)
        return copies

    def build_layout(self, scheduled: list[tuple[Sequence, int]]) -> KVLayout:
        layout = super().build_layout(scheduled)
        if self.state_blocks:  # the executor keeps the state in these pages' bytes
            layout.state_blocks = [self.states[seq.seq_id] for seq, _ in scheduled]
        return layout

    def slot_of(self, seq: Sequence, position: int) -> int:
        """The slot of `position` in the first allocation group (a full-attention one when the
        model has any)."""
        table = self.tables[seq.seq_id][0]
        return table[position // self.block_size] * self.block_size + position % self.block_size

    # Accounting -------------------------------------------------------------------------

    def _group_books(self, seq: Sequence) -> list[tuple[int, int, int, int]]:
        """Per group: (held slots, slots it will use, skipped slots, prompt blocks held)."""
        bs = self.block_size
        final = seq.final_kv_len
        prompt_blocks = self.blocks_for(seq.prompt_len)
        books = []
        for table, first in zip(self.tables[seq.seq_id], self.first[seq.seq_id], strict=True):
            taken = max(len(table), first)
            held = (taken - first) * bs
            skipped = first * bs
            will = min(held, max(final - skipped, 0))
            books.append((held, will, skipped, max(0, min(taken, prompt_blocks) - first)))
        return books

    def _account_seq(self, seq: Sequence) -> None:
        self._unaccount(seq.seq_id)
        books = self._group_books(seq)
        self._books[seq.seq_id] = books
        for g, (held, will, skipped, prompt) in enumerate(books):
            self._g_held[g] += held
            self._g_will[g] += will
            self._g_skipped[g] += skipped
            self._g_prompt[g] += prompt

    def _unaccount(self, seq_id: int) -> None:
        for g, (held, will, skipped, prompt) in enumerate(self._books.pop(seq_id, ())):
            self._g_held[g] -= held
            self._g_will[g] -= will
            self._g_skipped[g] -= skipped
            self._g_prompt[g] -= prompt

    def _split_from_totals(
        self, running: list[Sequence], head_waiting: Sequence | None
    ) -> MemorySplit:
        computed = sum(seq.num_computed for seq in running if seq.seq_id in self._books)
        bs = self.block_size
        groups = []
        for g in range(self.num_groups):
            shared = self._g_shared[g] * bs  # full token slots counted once per holder
            token = computed - self._g_skipped[g] - shared
            will = self._g_will[g] - shared
            groups.append(MemorySplit(
                token=token, reserved=will - token, internal=self._g_held[g] - shared - will,
                prompt_blocks=self._g_prompt[g] if self.counts_prompt_blocks else None))
        return self._with_states(MemorySplit.of_groups(tuple(groups), self.num_slots, computed))

    def _with_states(self, split: MemorySplit) -> MemorySplit:
        """`split` with the states' pages held, holding no token."""
        if self.states:
            state = len(self.states) * self.state_blocks * self.block_size
            split.internal += state
            split.free -= state
        return split

    def memory_split_from_scratch(
        self, running: list[Sequence], head_waiting: Sequence | None
    ) -> MemorySplit:
        groups = [MemorySplit(prompt_blocks=0 if self.counts_prompt_blocks else None)
                  for _ in self.windows]
        bs = self.block_size
        computed = 0
        holders: list[dict[int, int]] = [{} for _ in self.windows]  # block -> holders
        for seq in running:
            tables = self.tables.get(seq.seq_id)
            if tables is None:
                continue
            computed += seq.num_computed
            prompt_blocks = self.blocks_for(seq.prompt_len)
            for g, table in enumerate(tables):
                held_ids = [i for i, b in enumerate(table) if b != FREED]
                if not held_ids:
                    continue
                start = held_ids[0] * bs
                split = groups[g]
                split.add_held(len(held_ids) * bs, seq.num_computed - start,
                               seq.final_kv_len - start)
                if self.counts_prompt_blocks:
                    split.prompt_blocks += sum(1 for i in held_ids if i < prompt_blocks)
                for i in held_ids:
                    holders[g][table[i]] = holders[g].get(table[i], 0) + 1
        for split, count in zip(groups, holders, strict=True):  # a shared block once
            split.token -= sum(k - 1 for k in count.values()) * bs
        return self._with_states(MemorySplit.of_groups(tuple(groups), self.num_slots, computed))

    def is_whole(self) -> bool:
        return not self.tables and not self.states and self.pool.is_whole()
