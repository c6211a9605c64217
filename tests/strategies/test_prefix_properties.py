"""Property tests of `prefix`: under random admit / step / fork / free sequences (evictions
happen whenever the small pool runs dry), reference counts and the hash index stay consistent
with the block tables, every live sequence reads back exactly its own tokens' KV through its
block table (so hits and copy-on-write are right), and the pool is whole at the end.

Slots come from the executor's persistent table arrays fed by the strategy's table log, and
every memory split is checked against its from-scratch recomputation."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.execution.step_inputs import BlockTableArrays, layout_indices
from kvbench.scheduling.base import in_prefill
from kvbench.strategies.prefix import PrefixCachingStrategy
from tests.strategies.consistency import check_consistency

VOCAB = 3  # a tiny vocabulary so that random prompts share prefixes often


class Simulator:
    """Drives the strategy as the engine does, on a fake arena whose slots hold the identity
    of the KV they store: the token prefix `token_ids[:pos + 1]` it was computed from."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.cache = PrefixCachingStrategy(num_blocks * block_size + block_size - 1, 512,
                                           block_size=block_size, watermark=0.0,
                                           check_accounting=True)
        self.tables = BlockTableArrays(rows=2, width=2)  # small: growth is exercised too
        self.arena: list[tuple[int, ...] | None] = [None] * (num_blocks * block_size)
        self.live: list[Sequence] = []
        self.next_id = 0
        self.hits = 0

    def _new_seq(self, tokens: list[int], output_len: int = 64) -> Sequence:
        request = Request(self.next_id, 0.0, tuple(tokens), output_len)
        seq = Sequence(self.next_id, request, 0, list(tokens))
        self.next_id += 1
        return seq

    def _run(self, scheduled: list[tuple[Sequence, int]], new_tokens: list[int]) -> None:
        """One engine step: copies, then writes, then commit and sample."""
        layout = self.cache.build_layout(scheduled)
        for copy in layout.slot_copies:  # in order, before any write, as the executor does
            src, dst, n = copy.src_slot, copy.dst_slot, copy.num_slots
            self.arena[dst : dst + n] = self.arena[src : src + n]
        self._step_states(layout, scheduled)
        slots = iter(layout_indices(layout, self.tables, 0).slot_mapping.tolist())
        for seq in self.live:  # the executor's copy of every table follows the strategy's
            table = self.cache.tables.get(seq.seq_id)
            if table:
                row = self.tables.row_of[seq.seq_id]
                assert self.tables.table[row, : len(table)].tolist() == table
                assert self.tables.lengths[row] == len(table)
        for seq, n in scheduled:
            for pos in range(seq.num_computed, seq.num_computed + n):
                self.arena[next(slots)] = tuple(seq.token_ids[: pos + 1])
        for seq, n in scheduled:  # what the step's attention reads
            self._check_reads(seq, seq.num_computed + n)
        for (seq, n), token in zip(scheduled, new_tokens, strict=False):
            seq.num_computed += n
            if seq.num_computed == len(seq.token_ids):
                seq.token_ids.append(token)

    def _step_states(self, layout, scheduled: list[tuple[Sequence, int]]) -> None:
        """A hybrid's recurrent states (`StateSimulator`): none here."""

    def admit(self, prompts: list[list[int]], sample: int, run: bool = True) -> None:
        """One admission round: admit prompts in order while they fit (a later one may share
        blocks an earlier one has not computed yet). With `run`, their prefills run together
        at once (continuous batching); without, they wait for the next `step` (static
        batching forms a batch, then packs its prompts into steps)."""
        scheduled = []
        for tokens in prompts:
            seq = self._new_seq(tokens)
            if not self.cache.can_admit(seq, len(self.live)):
                break
            cached = self.cache.admit(seq)
            assert cached % self.cache.block_size == 0 and cached < len(tokens)
            self.hits += cached
            seq.num_computed += cached
            self.live.append(seq)
            n = self.cache.prefill_chunk(seq, seq.num_uncomputed)
            if n:  # (0: a hybrid's chunk `align` cuts to nothing waits for a later step)
                scheduled.append((seq, n))
        # An admission step runs only when no earlier prompt is left half done (policies
        # schedule running prompts before admitting, or form a batch only when none runs).
        if scheduled and run and not any(in_prefill(s) for s in self.live if
                                         all(s is not x for x, _ in scheduled)):
            self._run(scheduled, [sample] * len(scheduled))

    def step(self, rotate: int, samples: list[int], budget: int) -> None:
        """Every live sequence computes its next tokens, prompts cut to a token budget as in
        chunked prefill. Sequences go in admission order (as both batching policies do) while
        any has not computed its prompt, else starting at a rotated position. One that cannot
        grow preempts the most recently admitted unscheduled one, or itself."""
        k = rotate % len(self.live) if self.live else 0
        if any(in_prefill(seq) for seq in self.live):
            k = 0
        pending = self.live[k:] + self.live[:k]
        scheduled: list[tuple[Sequence, int]] = []
        while pending and budget > 0:
            seq = pending.pop(0)
            n = self.cache.prefill_chunk(seq, min(seq.num_uncomputed, budget))
            if not n:  # cut to nothing (a hybrid's `align`): it computes nothing this step
                continue
            while not self.cache.allocate(seq, n):
                victim = pending.pop() if pending else seq
                self.free(victim)
                if victim is seq:
                    break
            else:
                scheduled.append((seq, n))
                budget -= n
        if scheduled:
            self._run(scheduled, samples * len(scheduled))

    def fork(self, i: int, token: int) -> None:
        if not self.live:
            return
        parent = self.live[i % len(self.live)]
        if in_prefill(parent):
            return
        child = self._new_seq(parent.token_ids[: parent.num_computed] + [token])
        assert self.cache.fork(parent, child) == []
        child.num_computed = parent.num_computed
        self.live.append(child)

    def _check_reads(self, seq: Sequence, length: int, skip_pending: bool = False) -> None:
        bs = self.cache.block_size
        table = self.cache.tables[seq.seq_id]
        assert len(table) * bs >= length
        for pos in range(length):
            block = table[pos // bs]
            if skip_pending and block in self.cache._pending_hash:
                continue
            assert self.arena[block * bs + pos % bs] == tuple(seq.token_ids[: pos + 1]), (
                f"sequence {seq.seq_id} reads wrong KV at position {pos}"
            )

    def split_by_block(self) -> tuple[int, int, int]:
        """(token, reserved, internal) slots, block by block: max over each block's owners."""
        bs = self.cache.block_size
        per_block: dict[int, tuple[int, int]] = {}
        for seq in self.live:
            last = max(seq.final_kv_len, seq.num_computed)
            for i, block in enumerate(self.cache.tables[seq.seq_id]):
                filled = min(max(seq.num_computed - i * bs, 0), bs)
                will = min(max(last - i * bs, filled), bs)
                old = per_block.get(block, (0, 0))
                per_block[block] = (max(old[0], filled), max(old[1], will))
        token = sum(f for f, _ in per_block.values())
        use = sum(w for _, w in per_block.values())
        return token, use - token, len(per_block) * bs - use

    def finish(self, i: int) -> None:
        """A sequence that has computed everything but its last sample leaves."""
        done = [seq for seq in self.live if not in_prefill(seq)]
        if done:
            self.free(done[i % len(done)])

    def free(self, seq: Sequence) -> None:
        self.cache.free(seq)
        self.live.remove(seq)

    def check(self) -> None:
        check_consistency(self.cache)
        bs = self.cache.block_size
        for seq in self.live:
            # positions in blocks still pending hold nothing yet: their owner writes them at
            # the latest in the step that first reads them (checked in `_run`)
            self._check_reads(seq, seq.num_computed, skip_pending=True)
        # every named block holds the KV of the full prefix its hash names
        for block in self.cache.pool.hash_of:
            content = self.arena[block * bs : (block + 1) * bs]
            assert all(c is not None for c in content)
            last = content[-1]
            assert all(c == last[: len(c)] for c in content), "a named block mixes prefixes"
        split = self.cache.memory_split(self.live, None)
        assert (split.token, split.reserved, split.internal) == self.split_by_block()
        assert split.total == self.cache.num_slots
        assert min(split.token, split.reserved, split.internal, split.free) >= 0
        assert split.cached <= split.free
        assert split.cached == self.cache.pool.num_evictable * bs


PREFIXES = ([], [0, 1, 2, 0, 1, 2, 0, 1], [2, 2, 1, 1, 0, 0])  # shared starts make hits likely
tokens_st = st.builds(
    lambda prefix, tail: list(prefix) + tail,
    st.sampled_from(PREFIXES),
    st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=8),
)
admit_st = st.tuples(st.just("admit"), st.lists(tokens_st, min_size=1, max_size=3),
                     st.integers(0, VOCAB - 1), st.booleans())
step_st = st.tuples(st.just("step"), st.integers(0, 20),
                    st.lists(st.integers(0, VOCAB - 1), min_size=4, max_size=4),
                    st.sampled_from([3, 8, 1000]))
fork_st = st.tuples(st.just("fork"), st.integers(0, 20), st.integers(0, VOCAB - 1))
free_st = st.tuples(st.just("free"), st.integers(0, 20))
# weights by repetition: steps and forks often, frees rarely (the pool fills and evicts)
op_st = st.one_of(admit_st, step_st, fork_st, step_st, admit_st, step_st, fork_st, free_st)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_blocks=st.integers(3, 10),
    block_size=st.sampled_from([1, 2, 4]),
    ops=st.lists(op_st, min_size=4, max_size=40),
)
def test_random_admit_fork_free_keeps_counts_index_and_contents_consistent(
    num_blocks, block_size, ops
):
    sim = Simulator(num_blocks, block_size)
    for op in ops:
        kind = op[0]
        if kind == "admit":
            sim.admit([list(p) for p in op[1]], op[2], run=op[3])
        elif kind == "step":
            sim.step(op[1], op[2], op[3])
        elif kind == "fork":  # as the engine does: fork at a sample, then everyone decodes
            sim.fork(op[1], op[2])
            sim.check()
            sim.step(op[1], [op[2]], 1000)
        elif kind == "free":
            sim.finish(op[1])
        sim.check()
    for seq in list(sim.live):
        sim.free(seq)
    sim.check()
    assert sim.cache.is_whole()
    pool = sim.cache.pool
    assert pool.num_free == pool.num_blocks
    assert not any(pool.ref_counts)


def test_simulator_sees_hits_forks_copies_and_evictions():
    """The random model above does reach the interesting paths (guards against a vacuous test)."""
    sim = Simulator(num_blocks=6, block_size=2)
    sim.admit([[1, 2, 1, 2, 1]], 0)  # 3 blocks
    sim.check()
    first = sim.live[0]
    sim.fork(0, 2)  # shares the partial last block
    sim.step(0, [0, 1], 1000)  # both write into the shared block: one copies
    sim.check()
    assert sim.cache.cow_copies == 1
    sim.free(first)
    sim.admit([[1, 2, 1, 2, 2, 2]], 0)  # hits two full blocks
    sim.check()
    assert sim.hits == 4
    for seq in list(sim.live):
        sim.free(seq)
    sim.admit([[2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]], 0)  # 6 fresh blocks: evicts cached ones
    sim.check()
    assert sim.cache.pool.evictions > 0
    for seq in list(sim.live):
        sim.free(seq)
    sim.admit([[0, 1, 0, 1, 0], [0, 1, 0, 1, 1, 1]], 0)  # the second shares the first's
    sim.check()                                         # blocks while they are computed
    assert sim.cache.pending_hit_blocks == 2
    for seq in list(sim.live):
        sim.free(seq)
    assert sim.cache.is_whole()
