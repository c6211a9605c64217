"""`paged`: block tables grow one block at a time; the pool is whole after random use."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.strategies.block_pool import BlockPool
from kvbench.strategies.paged import PagedStrategy


def seq(seq_id: int, prompt_len: int, output_len: int) -> Sequence:
    request = Request(seq_id, 0.0, tuple(range(prompt_len)), output_len)
    return Sequence(seq_id, request, 0, list(request.prompt_token_ids))


def test_block_allocated_only_when_last_is_full():
    strategy = PagedStrategy(num_slots=64, max_model_len=64, block_size=4, watermark=0)
    s = seq(0, 5, 10)
    strategy.admit(s)
    assert len(strategy.tables[0]) == 2  # 5 prompt tokens -> 2 blocks of 4
    s.num_computed = 5
    for expected_blocks in (2, 2, 2, 3):  # positions 5, 6, 7 fit; 8 needs a third block
        assert strategy.allocate(s, 1)
        assert len(strategy.tables[0]) == expected_blocks
        s.num_computed += 1


def test_slots_follow_block_table_and_split_adds_up():
    strategy = PagedStrategy(num_slots=40, max_model_len=64, block_size=8, watermark=0)
    a, b = seq(0, 9, 4), seq(1, 3, 2)
    strategy.admit(a)
    strategy.admit(b)
    table = strategy.tables[0]
    assert strategy.slot_of(a, 8) == table[1] * 8
    a.num_computed, b.num_computed = 9, 3
    split = strategy.memory_split([a, b], None)
    # a: 16 held, 12 final -> 9 token, 3 reserved, 4 internal; b: 8 held, 4 final
    assert (split.token, split.reserved, split.internal) == (12, 3 + 1, 4 + 4)
    assert split.total == 40 and split.external == 0


def test_watermark_keeps_blocks_for_running_sequences():
    strategy = PagedStrategy(num_slots=100 * 4, max_model_len=400, block_size=4, watermark=0.1)
    first = seq(0, 4 * 85, 1)
    assert strategy.can_admit(first, num_running=0)
    strategy.admit(first)
    second = seq(1, 4 * 6, 1)
    assert not strategy.can_admit(second, num_running=1)  # would leave 9 < 10 free blocks
    assert strategy.can_admit(seq(2, 4 * 5, 1), num_running=1)


@settings(max_examples=150, deadline=None)
@given(
    block_size=st.sampled_from([1, 2, 4, 16]),
    ops=st.lists(st.tuples(st.integers(0, 7), st.integers(1, 20)), max_size=80),
)
def test_random_grow_and_free_keeps_pool_consistent(block_size, ops):
    # (reference counts are kept where the books are checked)
    strategy = PagedStrategy(num_slots=256, max_model_len=512, block_size=block_size, watermark=0,
                             check_accounting=True)
    live: dict[int, Sequence] = {}
    for key, n in ops:
        if key in live and n % 3 == 0:
            strategy.free(live.pop(key))
        elif key in live:
            s = live[key]
            if strategy.allocate(s, n):
                s.num_computed += n
        else:
            s = seq(key, n, 5)
            if strategy.can_admit(s, len(live)):
                strategy.admit(s)
                s.num_computed = n
                live[key] = s
        owned = [b for t in strategy.tables.values() for b in t]
        assert len(owned) == len(set(owned)), "a block is owned by two sequences"
        assert all(strategy.pool.ref_counts[b] == 1 for b in owned)
        assert strategy.pool.num_free + len(owned) == strategy.pool.num_blocks
        for s in live.values():
            assert len(strategy.tables[s.seq_id]) * block_size >= s.num_computed
    for s in live.values():
        strategy.free(s)
    assert strategy.is_whole()


def test_block_pool_rejects_double_release():
    pool = BlockPool(2)
    block = pool.allocate()
    assert pool.release(block)
    try:
        pool.release(block)
    except ValueError:
        return
    raise AssertionError("double release accepted")


@settings(max_examples=150, deadline=None)
@given(block_size=st.sampled_from([1, 4, 16]), num_blocks=st.integers(1, 120),
       prompts=st.lists(st.integers(1, 60), min_size=1, max_size=12),
       decoded=st.lists(st.integers(0, 40), min_size=12, max_size=12),
       max_steps=st.integers(1, 200), joined_at=st.integers(0, 1000),
       ahead=st.lists(st.booleans(), min_size=12, max_size=12))
def test_cohort_run_steps_and_growth_are_step_by_step_allocation(
        block_size, num_blocks, prompts, decoded, max_steps, joined_at, ahead):
    """How many decode steps of the decode cohort's members fit (`cohort_run_steps`) and the
    blocks a run of them takes (`grow_cohort_run`), against one `allocate` of every
    sequence's next token a step on a twin strategy, until one does not fit: the same count,
    the same block tables and free list, the same totals. Some members already hold the slot
    of the token they compute next (`ahead`: a recomputed prompt's blocks are all taken at
    admission, so it may end its prefill with a whole free block)."""
    def build() -> tuple[PagedStrategy, list[Sequence]]:
        strategy = PagedStrategy(num_blocks * block_size, 4096, block_size=block_size,
                                 check_accounting=True)
        seqs = []
        for i, prompt_len in enumerate(prompts):
            s = seq(i, prompt_len, 10_000)
            if not strategy.can_admit(s, 0):
                break
            strategy.admit(s)
            s.num_computed = prompt_len
            for _ in range(decoded[i]):  # tokens decoded before the run
                s.token_ids.append(0)
                if not strategy.allocate(s, 1):
                    s.token_ids.pop()
                    break
                s.num_computed += 1
            s.token_ids.append(0)  # the token the next step computes
            if ahead[i] and not strategy.allocate(s, 1):
                break
            seqs.append(s)
        return strategy, seqs

    fast, seqs = build()
    if not seqs:
        return
    stepped, twins = build()
    steps = 0
    while steps < max_steps and all(stepped.allocate(s, 1) for s in twins):
        for s in twins:
            s.num_computed += 1
            s.token_ids.append(0)
        steps += 1
        snapshot = ({k: list(v) for k, v in stepped.tables.items()}, stepped.pool.free_blocks(),
                    stepped.books_totals())
    for rank, s in enumerate(seqs):  # members joined at cohort step `joined_at`
        fast.join_decode_cohort(s, joined_at, rank)
    fits = fast.cohort_run_steps(joined_at, len(seqs), max_steps)
    assert fits == steps
    if fits:
        fast.grow_cohort_run(joined_at, fits)
        assert ({k: list(v) for k, v in fast.tables.items()}, fast.pool.free_blocks(),
                fast.books_totals()) == snapshot
    # The table log (what an executor applies) gives the tables too.
    tables: dict[int, dict[int, int]] = {}
    for seq_id, index, block in fast.build_layout([]).table_log:
        tables.setdefault(seq_id, {})[index] = block
    assert {k: [v[i] for i in range(len(v))] for k, v in tables.items()} == fast.tables


@pytest.mark.parametrize(("usable", "watermark", "kept"), [
    (120, 0.01, 1),  # vLLM: int(0.01 x 121); a ceil of 0.01 x 120 would keep 2
    (99, 0.01, 1), (199, 0.01, 2), (100, 0.1, 10), (50, 0.0, 0),
])
def test_watermark_rounds_as_vllm(usable, watermark, kept):
    """vLLM v1 keeps int(watermark x num_blocks) free, its pool counting one null block."""
    strategy = PagedStrategy(num_slots=usable * 4, max_model_len=usable * 4, block_size=4,
                             watermark=watermark)
    assert strategy.watermark_blocks == kept
    fits = usable - kept
    assert strategy.can_admit(seq(0, 4 * fits, 1), num_running=1)
    assert not strategy.can_admit(seq(1, 4 * (fits + 1), 1), num_running=1)
    assert strategy.can_admit(seq(2, 4 * usable, 1), num_running=0)  # nobody to grow
