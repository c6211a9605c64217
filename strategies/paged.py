"""`paged`: vLLM's PagedAttention allocation.

KV lives in fixed-size blocks taken from a free pool; each sequence has a block table and
gets one more block only when its last block is full, so at most `block_size - 1` slots per
sequence are ever held ahead of use.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass
from itertools import repeat

from kvbench.core.block_size import DEFAULT_BLOCK_SIZE
from kvbench.core.layout import SlotCopy
from kvbench.core.sequence import Sequence
from kvbench.strategies.base import BooksAfterStep, CacheStrategy, MemorySplit, split_held
from kvbench.strategies.block_pool import BlockPool
from kvbench.strategies.registry import register_strategy


@dataclass(frozen=True)
class PagedOptions:
    block_size: int = DEFAULT_BLOCK_SIZE
    watermark: float = 0.01  # share of blocks admission keeps free for running sequences


@register_strategy(
    "paged", "fixed-size blocks from a pool, per-sequence block tables", PagedOptions
)
class PagedStrategy(CacheStrategy):
    name = "paged"
    layout_kind = "paged"
    can_preempt = True

    def __init__(
        self,
        num_slots: int,
        max_model_len: int,
        block_size: int = DEFAULT_BLOCK_SIZE,
        watermark: float = 0.01,
        check_accounting: bool | None = None,
    ) -> None:
        super().__init__(num_slots, max_model_len, check_accounting)
        self.block_size = block_size
        self.table_block_size = block_size
        self.pool = BlockPool(num_slots // block_size)
        # Free blocks kept back at admission so running sequences can grow (vLLM's watermark).
        self.watermark_blocks = math.ceil(watermark * self.pool.num_blocks)
        self.tables: dict[int, list[int]] = {}

    @property
    def capacity_tokens(self) -> int:
        return self.pool.num_blocks * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def required_slots(self, seq: Sequence) -> int:
        return self.blocks_for(seq.final_kv_len) * self.block_size

    def _blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        table = self.tables.get(seq.seq_id)
        have = len(table) if table else 0
        need = seq.num_computed + num_new_tokens
        if have * self.block_size >= need:  # the common decode case: room in the last block
            return 0
        return self.blocks_for(need) - have

    def can_admit(self, seq: Sequence, num_running: int) -> bool:
        needed = self._blocks_needed(seq, seq.num_uncomputed)
        keep = self.watermark_blocks if num_running else 0
        return self.pool.num_free - needed >= keep

    def admit(self, seq: Sequence) -> int:
        self.tables.setdefault(seq.seq_id, [])
        if not self.allocate(seq, seq.num_uncomputed):
            raise MemoryError(f"admit of sequence {seq.seq_id} without room; call can_admit first")
        return 0

    def allocate(self, seq: Sequence, num_new_tokens: int) -> bool:
        needed = self._blocks_needed(seq, num_new_tokens)
        if needed == 0:
            return True
        if needed > self.pool.num_free:
            return False
        table = self.tables.setdefault(seq.seq_id, [])
        self._extend_table(seq, table, self.pool.allocate_many(needed))
        return True

    # Decode runs -------------------------------------------------------------------------
    # A decoding sequence takes a block at the step whose token overflows its last one and
    # every `block_size` steps after; the pool runs dry only when more are needed than it has.

    fast_forward_decodes = True
    reads_no_token_ids = True  # lengths only, never ids (`declares`)

    def _first_overflows(self, seqs: list[Sequence]) -> list[int]:
        """The step of a decode run (0: the first) at which each sequence takes a block."""
        tables, bs = self.tables, self.block_size
        return [len(tables[seq.seq_id]) * bs - seq.num_computed for seq in seqs]

    def decode_run_steps(self, seqs: list[Sequence], max_steps: int) -> int:
        bs = self.block_size
        free = self.pool.num_free
        # A sequence takes at most one block per `block_size` steps (its first may come at
        # once): with that many free, the run fits without looking at any sequence.
        if len(seqs) * -(-max_steps // bs) <= free:
            return max_steps
        firsts = sorted(self._first_overflows(seqs))

        def blocks_within(steps: int) -> int:  # of the sequences taking one before `steps`
            taking = bisect_left(firsts, steps)
            if steps <= bs:  # one block each at most (no first is negative): just the count
                return taking
            return sum([(steps - first + bs - 1) // bs for first in firsts[:taking]])

        # A tight pool fits few steps: those are found from the first on, doubling, where a
        # short span looks at the few sequences whose block comes within it.
        low, high = 0, 1  # then: blocks_within(low) fits, blocks_within(high) does not
        while True:
            if high >= max_steps:
                if blocks_within(max_steps) <= free:
                    return max_steps
                high = max_steps
                break
            if blocks_within(high) > free:
                break
            low, high = high, 2 * high
        while high - low > 1:
            mid = (low + high) // 2
            if blocks_within(mid) <= free:
                low = mid
            else:
                high = mid
        return low

    def grow_decode_run(self, seqs: list[Sequence], num_steps: int) -> list[BooksAfterStep]:
        """The blocks in step order, admission order within a step, as `allocate_each` takes
        them, with each step's totals followed here and each sequence's own entry in the
        books (`_account`) set once, at its last block: a block costs a few operations, not
        a call chain (a long run of many sequences takes one every `block_size` steps each)."""
        bs = self.block_size
        firsts = self._first_overflows(seqs)
        if num_steps > bs:
            events = [(step, i) for i, first in enumerate(firsts)
                      for step in range(first, num_steps, bs)]
        else:  # a run no longer than a block takes one at most per sequence
            events = [(first, i) for i, first in enumerate(firsts) if first < num_steps]
        if not events:
            return []
        events.sort()
        blocks = self.pool.allocate_many(len(events))
        tables, log = self.tables, self._table_log.append
        held, will, prompt = self._held_slots, self._will_use_slots, self._prompt_blocks
        books: list[BooksAfterStep] = []
        grown: dict[int, Sequence] = {}
        last = len(events) - 1
        for k, (step, i) in enumerate(events):
            seq = seqs[i]
            seq_id = seq.seq_id
            table = tables[seq_id]
            index = len(table)
            block = blocks[k]
            log((seq_id, index, block))
            table.append(block)
            final = seq.end_len - 1  # `_account`'s
            before, after = index * bs, (index + 1) * bs
            held += bs
            will += (after if after < final else final) - (before if before < final else final)
            prompt += index < -(-seq.prompt_len // bs)
            grown[i] = seq
            if k == last or events[k + 1][0] != step:
                books.append((step, held, will, prompt))
        entries = self._held
        for seq in grown.values():  # `_account_table` of each, its totals followed above
            prompt_len = seq.prompt_len
            final = seq.end_len - 1
            num_blocks = len(tables[seq.seq_id])
            held_slots = num_blocks * bs
            entries[seq.seq_id] = (held_slots, held_slots if held_slots < final else final,
                                   min(num_blocks, -(-prompt_len // bs)))
        self._held_slots, self._will_use_slots, self._prompt_blocks = held, will, prompt
        if self.check_accounting:
            sums = tuple(map(sum, zip(*entries.values(), strict=True))) or (0, 0, 0)
            if sums != (held, will, prompt):
                raise AssertionError(f"{self.name}: a decode run's totals {(held, will, prompt)}"
                                     f" differ from its sequences' books {sums}")
        return books

    def decode_run_split_parts(self, head_waiting: Sequence | None) -> tuple[int, int, bool]:
        return 0, 0, True

    def allocate_each(self, items: list[tuple[Sequence, int]], start: int = 0) -> int:
        """`allocate` for every sequence that needs a new block: one with room in its last
        block takes nothing (see `CacheStrategy` for a subclass that must see every call)."""
        tables = self.tables
        block_size = self.block_size
        for i in range(start, len(items)):
            seq, n = items[i]
            table = tables.get(seq.seq_id)
            if table and len(table) * block_size >= seq.num_computed + n:
                continue  # `_blocks_needed` is 0, inlined: the common decode case
            if not self.allocate(seq, n):
                return i
        return len(items)

    # Every change to a table goes through these three: the log and the totals follow it.

    def _extend_table(self, seq: Sequence, table: list[int], blocks: list[int]) -> None:
        start = len(table)  # `_log_table` of each, in one call: a prompt takes dozens
        self._table_log.extend(zip(repeat(seq.seq_id), range(start, start + len(blocks)),
                                   blocks))
        table.extend(blocks)
        self._account_table(seq, table)

    def _replace_block(self, seq: Sequence, table: list[int], index: int, block: int) -> None:
        table[index] = block
        self._log_table(seq.seq_id, index, block)

    def _drop_table(self, seq: Sequence) -> list[int]:
        table = self.tables.pop(seq.seq_id, None)
        if table is None:
            return []
        self._account(seq, 0)
        self._log_drop(seq.seq_id)
        return table

    def _account_table(self, seq: Sequence, table: list[int]) -> None:
        prompt_blocks = -(-seq.prompt_len // self.block_size)
        self._account(seq, len(table) * self.block_size, min(len(table), prompt_blocks))

    def free(self, seq: Sequence) -> None:
        self.pool.release_many(self._drop_table(seq))

    def fork(self, parent: Sequence, child: Sequence) -> list[SlotCopy] | None:
        """Plain paging shares nothing: the child gets its own copy of every block."""
        parent_table = self.tables[parent.seq_id]
        if len(parent_table) > self.pool.num_free:
            return None
        child_table = [self.pool.allocate() for _ in parent_table]
        self.tables[child.seq_id] = []
        self._extend_table(child, self.tables[child.seq_id], child_table)
        copies = [
            SlotCopy(src * self.block_size, dst * self.block_size, self.block_size)
            for src, dst in zip(parent_table, child_table, strict=True)
        ]
        self._copies.extend(copies)
        return copies

    def slot_of(self, seq: Sequence, position: int) -> int:
        table = self.tables[seq.seq_id]
        return table[position // self.block_size] * self.block_size + position % self.block_size

    def _split_from_totals(
        self, running: list[Sequence], head_waiting: Sequence | None
    ) -> MemorySplit:
        split = super()._split_from_totals(running, head_waiting)
        split.prompt_blocks = self._prompt_blocks
        return split

    def memory_split_from_scratch(
        self, running: list[Sequence], head_waiting: Sequence | None
    ) -> MemorySplit:
        split = MemorySplit(prompt_blocks=0)
        for seq in running:
            table = self.tables.get(seq.seq_id)
            if not table:
                continue
            split.prompt_blocks += min(len(table), self.blocks_for(seq.prompt_len))
            token, reserved, internal = split_held(
                len(table) * self.block_size, seq.num_computed, seq.final_kv_len
            )
            split.token += token
            split.reserved += reserved
            split.internal += internal
        split.free = self.num_slots - split.held  # includes the sub-block remainder of the arena
        return split

    def is_whole(self) -> bool:
        return not self.tables and self.pool.is_whole()
