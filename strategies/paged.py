"""`paged`: vLLM's PagedAttention allocation.

KV lives in fixed-size blocks taken from a free pool; each sequence has a block table and
gets one more block only when its last block is full, so at most `block_size - 1` slots per
sequence are ever held ahead of use.

A state-space hybrid's sequence also holds `state_blocks` blocks from admission to finish,
whatever its length: its recurrent layers' state, as vLLM's hybrid allocator holds one page
per state group (`kvbench.sizing.state_pages`). They are counted as held without tokens (the
split's `internal`), and a strategy holding them takes no part in decode runs. Each layout
names every scheduled sequence's state blocks (`KVLayout.state_blocks`): the engine's
executor keeps the state in those blocks' bytes, so a fork copies them as it copies KV.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat

from kvbench.core.block_size import DEFAULT_BLOCK_SIZE
from kvbench.core.decode_run_rows import BooksAfterStep
from kvbench.core.layout import KVLayout, SlotCopy
from kvbench.core.sequence import Sequence
from kvbench.strategies.base import CacheStrategy, MemorySplit
from kvbench.strategies.block_pool import BlockPool
from kvbench.strategies.registry import register_strategy

# A member of the decode cohort as its blocks are taken: (seq_id, its block table, its
# `final_kv_len`, the blocks its prompt fills).
_Member = tuple[int, list[int], int, int]


@dataclass(frozen=True)
class PagedOptions:
    block_size: int = DEFAULT_BLOCK_SIZE
    watermark: float = 0.01  # share of blocks admission keeps free for running sequences


@dataclass(frozen=True)
class PagedStateOptions(PagedOptions):
    """`paged`'s own options: also a hybrid's state (`prefix` declares its own, with where it
    keeps state checkpoints: `PrefixOptions.mamba_cache_mode`)."""

    state_blocks: int = 0  # blocks a sequence's recurrent state holds (a hybrid's)


@register_strategy(
    "paged", "fixed-size blocks from a pool, per-sequence block tables", PagedStateOptions
)
class PagedStrategy(CacheStrategy):
    name = "paged"
    layout_kind = "paged"
    admits_chunks = True  # memory per scheduled chunk (`CacheStrategy.admit`)

    def __init__(
        self,
        num_slots: int,
        max_model_len: int,
        block_size: int = DEFAULT_BLOCK_SIZE,
        watermark: float = 0.01,
        state_blocks: int = 0,
        check_accounting: bool | None = None,
    ) -> None:
        super().__init__(num_slots, max_model_len, check_accounting)
        self.block_size = block_size
        # Each admitted sequence's state blocks, by seq_id (none without recurrent layers).
        self.state_blocks = state_blocks
        self.states: dict[int, list[int]] = {}
        if state_blocks:
            self.decode_runs = False  # runs count table blocks only
        self.table_block_size = block_size
        # A table's blocks are each held once: no reference counts but to check the books.
        self.pool = BlockPool(num_slots // block_size, counts_references=self.check_accounting)
        # Free blocks kept back at admission so running sequences can grow: vLLM v1's
        # rounding (`KVCacheManager`: int(watermark x its blocks), its null block counted).
        self.watermark_blocks = int(watermark * (self.pool.num_blocks + 1))
        self.tables: dict[int, list[int]] = {}
        # The decode cohort's members by phase (`join_decode_cohort`), each seq_id -> member
        # in admission order, and each member's phase.
        self._phases: list[dict[int, _Member]] = [{} for _ in range(block_size)]
        self._phase_of: dict[int, int] = {}
        # Members whose first block is a whole round away: the cohort step it comes at, and
        # the latest of those steps.
        self._not_before: dict[int, int] = {}
        self._not_before_until = -1
        # The cohort step at which a member takes the block that holds its final token, where
        # that block has slots it will never use: the member, and how many (`grow_cohort_run`
        # counts every other block whole).
        self._last_takes: dict[int, list[tuple[_Member, int]]] = {}

    @property
    def capacity_tokens(self) -> int:
        return self.pool.num_blocks * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def required_slots(self, seq: Sequence) -> int:
        return (self.blocks_for(seq.final_kv_len) + self.state_blocks) * self.block_size

    def _blocks_needed(self, seq: Sequence, num_new_tokens: int) -> int:
        table = self.tables.get(seq.seq_id)
        have = len(table) if table else 0
        need = seq.num_computed + num_new_tokens
        if have * self.block_size >= need:  # the common decode case: room in the last block
            return 0
        return self.blocks_for(need) - have

    def can_admit(self, seq: Sequence, num_running: int) -> bool:
        needed = self._blocks_needed(seq, seq.num_uncomputed)
        if self.state_blocks and seq.seq_id not in self.states:
            needed += self.state_blocks
        keep = self.watermark_blocks if num_running else 0
        return self.pool.num_free - needed >= keep

    def admit(self, seq: Sequence, max_new_tokens: int | None = None) -> int:
        if self.state_blocks and seq.seq_id not in self.states:
            if self.state_blocks > self.pool.num_free:
                raise MemoryError(f"admit of sequence {seq.seq_id} without room for its state")
            self.states[seq.seq_id] = self.pool.allocate_many(self.state_blocks)
        self.tables.setdefault(seq.seq_id, [])
        n = seq.num_uncomputed
        if not self.allocate(seq, n if max_new_tokens is None else min(n, max_new_tokens)):
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

    # Decode runs (`kvbench.engine.fast_forward.RunStrategy`) ------------------------------
    # A decoding sequence holds at most `block_size` free slots (a full block only when it
    # finishes recomputing a prompt whose blocks were all taken at admission): a member of
    # the decode cohort takes a block at the first cohort step whose token overflows them
    # and every `block_size` steps after, so the steps it takes one at are one residue
    # modulo `block_size`, its phase. The members are kept by phase, each phase in admission
    # order: a cohort step's blocks go to the members of its phase (but one whose first
    # block is more than a round away: `_not_before`), and a run costs the blocks it takes,
    # not a pass over the members.

    decode_runs = True
    reads_no_token_ids = True  # lengths only, never ids (`declares`)

    def join_decode_cohort(self, seq: Sequence, ordinal: int, rank: int) -> None:
        bs = self.block_size
        seq_id = seq.seq_id
        table = self.tables[seq_id]
        room = len(table) * bs - seq.num_computed
        if not 0 <= room <= bs:
            raise AssertionError(f"sequence {seq_id} decodes with {room} free slots held")
        phase = (ordinal + room) % bs
        final, prompt_blocks = seq.end_len - 1, -(-seq.prompt_len // bs)
        if len(table) < prompt_blocks:  # (its prompt is computed: its blocks are all taken)
            raise AssertionError(f"sequence {seq_id} decodes without its prompt's blocks")
        # What taking a block reads of the member, looked up once (`final_kv_len`, the blocks
        # its prompt fills); joined in admission order, so a phase's members stay in it.
        member = (seq_id, table, final, prompt_blocks)
        self._phases[phase][seq_id] = member
        self._phase_of[seq_id] = phase
        if room == bs:  # its phase comes up once before its first block
            self._not_before[seq_id] = ordinal + room
            self._not_before_until = max(self._not_before_until, ordinal + room)
        # Its blocks come at cohort steps ordinal + room, then every `bs`: the last one's
        # unused slots, counted at the step it is taken.
        blocks_left = -(-final // bs) - len(table)
        unused = (len(table) + blocks_left) * bs - final
        if blocks_left > 0 and unused:
            self._last_takes.setdefault(ordinal + room + (blocks_left - 1) * bs, []).append(
                (member, unused))

    def leave_decode_cohort(self, seq: Sequence) -> None:
        phase = self._phase_of.pop(seq.seq_id, None)
        if phase is not None:
            self._write_books(self._phases[phase].pop(seq.seq_id))
            self._not_before.pop(seq.seq_id, None)

    def _write_books(self, member: _Member) -> None:
        """A member's entry in the per-sequence books, from its table: the blocks it took in
        the cohort are in the totals, not in its entry (`_account`'s, as `_account_table`
        writes it)."""
        seq_id, table, final, prompt_blocks = member
        held = len(table) * self.block_size
        self._held[seq_id] = (held, held if held < final else final,
                              min(len(table), prompt_blocks))

    def clear_decode_cohort(self) -> None:
        for members in self._phases:
            for member in members.values():
                self._write_books(member)
            members.clear()
        self._last_takes.clear()
        self._phase_of.clear()
        self._not_before.clear()

    def _takers(self, ordinal: int) -> list[_Member]:
        """The members taking a block at cohort step `ordinal`, in admission order."""
        not_before = self._not_before
        return [member for seq_id, member in self._phases[ordinal % self.block_size].items()
                if not_before.get(seq_id, ordinal) <= ordinal]

    def cohort_run_steps(self, ordinal: int, num_members: int, max_steps: int) -> int:
        bs = self.block_size
        free = self.pool.num_free
        # A member takes at most one block per `block_size` steps (its first may come at
        # once): with that many free, the run fits without looking at any phase.
        if num_members * -(-max_steps // bs) <= free:
            return max_steps
        steps = 0
        if self._not_before and ordinal <= self._not_before_until:  # step by step until
            span = min(max_steps, self._not_before_until - ordinal + 1)  # every phase is whole
            for steps in range(span):
                taking = len(self._takers(ordinal + steps))
                if taking > free:
                    return steps
                free -= taking
            steps = span
            if steps == max_steps:
                return steps
        # Every `block_size` steps take one block a member; the steps of the last, partial
        # round take their phases' blocks in step order, as long as they fit.
        rounds = free // num_members
        steps += rounds * bs
        left = free - rounds * num_members
        phases, start = self._phases, ordinal + steps
        for j in range(bs):
            taking = len(phases[(start + j) % bs])
            if taking > left:
                break
            left -= taking
            steps += 1
        return min(steps, max_steps)

    def cohort_step_victims(self, ordinal: int,
                            candidates: list[Sequence]) -> list[Sequence] | None:
        # The victims' blocks go to the end of the free list and the takers take from its
        # front: preempting them first, then taking the step's blocks, gives every taker the
        # block it gets when the two interleave.
        takers = self._takers(ordinal)
        index = {seq.seq_id: i for i, seq in enumerate(candidates)}
        tables = self.tables
        free = self.pool.num_free
        end = len(candidates)  # candidates[:end] are still running
        victims: list[Sequence] = []
        for member in takers:
            i = index[member[0]]
            if i >= end:
                continue  # preempted before its turn
            while not free and end > i + 1:
                end -= 1
                victim = candidates[end]
                victims.append(victim)
                free += len(tables[victim.seq_id])
            if free:
                free -= 1
            else:  # the last one running: it goes itself
                end -= 1
                victims.append(candidates[end])
        return victims if end else None

    def grow_cohort_run(self, ordinal: int, num_steps: int) -> list[BooksAfterStep]:
        """The blocks in step order, admission order within a step, as the scheduler's
        `allocate` calls take them, with each step's totals: a block costs its table's
        append. Every block a member
        takes is counted whole (`bs` slots held, all of them to be used) but the one holding
        its final token (`_last_takes`); the members' per-sequence entries are written when
        they leave (`_write_books`)."""
        bs = self.block_size
        phases, pool = self._phases, self.pool
        log = self._table_log.append if self.keeps_table_log else None
        last_takes = self._last_takes
        held, will, prompt = self._held_slots, self._will_use_slots, self._prompt_blocks
        sorting_until = self._not_before_until if self._not_before else -1
        books: list[BooksAfterStep] = []
        for step in range(num_steps):
            at = ordinal + step
            lasts = last_takes.pop(at, None) if last_takes else None
            members = phases[at % bs]
            if not members:
                continue
            takers = members.values() if at > sorting_until else self._takers(at)
            if not takers:
                continue
            blocks = pool.allocate_many(len(takers))
            if log is None:
                for member, block in zip(takers, blocks, strict=True):
                    member[1].append(block)
            else:
                for member, block in zip(takers, blocks, strict=True):
                    log((member[0], len(member[1]), block))
                    member[1].append(block)
            taken = bs * len(blocks)
            held += taken
            will += taken
            if lasts:
                for member, unused in lasts:
                    if members.get(member[0]) is member:  # (not one that left since)
                        will -= unused
            books.append((step, held, will, prompt))
        if self._not_before and ordinal + num_steps > sorting_until:
            self._not_before.clear()  # every member's first block is behind it
        self._held_slots, self._will_use_slots = held, will
        if self.check_accounting and books:
            for members in phases:
                for member in members.values():
                    self._write_books(member)
            sums = tuple(map(sum, zip(*self._held.values(), strict=True))) or (0, 0, 0)
            if sums != (held, will, prompt):
                raise AssertionError(f"{self.name}: a decode run's totals {(held, will, prompt)}"
                                     f" differ from its sequences' books {sums}")
        return books

    def decode_run_split_parts(self, head_waiting: Sequence | None) -> tuple[int, int, bool]:
        return 0, 0, True

    # Every change to a table goes through these three: the log and the totals follow it.

    def _extend_table(self, seq: Sequence, table: list[int], blocks: list[int]) -> None:
        start = len(table)  # `_log_table` of each, in one call: a prompt takes dozens
        if self.keeps_table_log:
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
        self.leave_decode_cohort(seq)  # a member freed leaves the cohort
        self._account(seq, 0)
        self._log_drop(seq.seq_id)
        return table

    def _account_table(self, seq: Sequence, table: list[int]) -> None:
        prompt_blocks = -(-seq.prompt_len // self.block_size)
        self._account(seq, len(table) * self.block_size, min(len(table), prompt_blocks))

    def free(self, seq: Sequence) -> None:
        self.pool.release_many(self._drop_table(seq))
        if self.state_blocks:
            self.pool.release_many(self.states.pop(seq.seq_id, []))

    def fork(self, parent: Sequence, child: Sequence) -> list[SlotCopy] | None:
        """Plain paging shares nothing: the child gets its own copy of every block."""
        parent_table = self.tables[parent.seq_id]
        if len(parent_table) + self.state_blocks > self.pool.num_free:
            return None
        parent_blocks, child_blocks = list(parent_table), [self.pool.allocate() for _ in
                                                           parent_table]
        if self.state_blocks:  # the child's own state: a copy of the parent's blocks
            self.states[child.seq_id] = self.pool.allocate_many(self.state_blocks)
            parent_blocks += self.states[parent.seq_id]
            child_blocks += self.states[child.seq_id]
        self.tables[child.seq_id] = []
        self._extend_table(child, self.tables[child.seq_id],
                           child_blocks[:len(parent_table)])
        copies = [
            SlotCopy(src * self.block_size, dst * self.block_size, self.block_size)
            for src, dst in zip(parent_blocks, child_blocks, strict=True)
        ]
        self._copies.extend(copies)
        return copies

    def build_layout(self, scheduled: list[tuple[Sequence, int]]) -> KVLayout:
        layout = super().build_layout(scheduled)
        if self.state_blocks:
            layout.state_blocks = [self.states[seq.seq_id] for seq, _ in scheduled]
        return layout

    def slot_of(self, seq: Sequence, position: int) -> int:
        table = self.tables[seq.seq_id]
        return table[position // self.block_size] * self.block_size + position % self.block_size

    def _split_from_totals(
        self, running: list[Sequence], head_waiting: Sequence | None,
        computed_tokens: int | None = None,
    ) -> MemorySplit:
        split = super()._split_from_totals(running, head_waiting, computed_tokens)
        split.prompt_blocks = self._prompt_blocks
        if self.states:  # held, holding no token
            state = self._state_blocks_held() * self.block_size
            split.internal += state
            split.free -= state
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
            split.add_held(len(table) * self.block_size, seq.num_computed, seq.final_kv_len)
        split.internal += sum(len(blocks) for blocks in self.states.values()) * self.block_size
        split.free = self.num_slots - split.held  # includes the sub-block remainder of the arena
        return split

    def _state_blocks_held(self) -> int:
        """Blocks the running sequences' states hold (`state_blocks` each)."""
        return len(self.states) * self.state_blocks

    def is_whole(self) -> bool:
        return not self.tables and not self.states and self.pool.is_whole()
