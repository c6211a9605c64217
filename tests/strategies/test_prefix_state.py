"""`prefix` holding a state-space hybrid's recurrent state: a hit needs a state checkpoint
where it ends, and `--mamba-cache-mode` says where checkpoints are kept (vLLM's
`MambaManager`: none, align, all); the structural ceiling is what the block layout allows."""

from __future__ import annotations

import pytest

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.errors import KvbenchInputError
from kvbench.strategies import make_strategy

BS, STATE = 4, 2  # tokens a block, blocks a state


def _seq(seq_id: int, tokens: list[int], out: int = 4) -> Sequence:
    return Sequence(seq_id, Request(seq_id, 0.0, tuple(tokens), out), 0, list(tokens))


def _cache(mode: str, blocks: int = 40):
    return make_strategy("prefix", BS * blocks, 4096, block_size=BS, watermark=0.0,
                         state_blocks=STATE, mamba_cache_mode=mode, check_accounting=True)


def _run(cache, seq: Sequence, chunks: list[int] | None = None) -> int:
    """Admit, compute the prompt in `chunks` (one chunk: all of it), free; the hit."""
    chunks = chunks or [seq.num_uncomputed]
    assert cache.can_admit(seq, 0)
    hit = cache.admit(seq, chunks[0])
    seq.num_computed += hit
    for i, n in enumerate(chunks):
        if i:
            assert cache.allocate(seq, n)
        seq.num_computed += min(n, seq.num_uncomputed)
    cache.free(seq)
    return hit


PROMPT = list(range(9))  # two full blocks before the block of its last token
DIVERGES = [0, 1, 2, 3, 9, 9, 9, 9, 9]  # shares the first block only


def test_none_serves_no_hit_and_holds_one_state_a_sequence():
    cache = _cache("none")
    seq = _seq(0, PROMPT)
    cache.admit(seq)
    assert cache.pool.num_free == 40 - 3 - STATE and cache.states[0] and not cache.pool.shared
    seq.num_computed = 9
    cache.free(seq)
    assert _run(cache, _seq(1, PROMPT)) == 0
    stats = cache.stats()
    # an identical prompt: the layout allows its two full blocks
    assert stats["cache_hit_rate"] == 0 and stats["cache_ceiling_tokens"] == 8
    assert stats["cache_hit_ceiling"] == 8 / 18 and stats["state_checkpoints"] == 0
    assert cache.is_whole()


def test_align_hits_only_where_a_step_ended_on_a_boundary():
    """A checkpoint is the running state a step ended at (the executor copies it), so a
    chunk ending inside a block keeps none (the scheduler cuts chunks: `prefill_chunk`)."""
    cache = _cache("align")
    assert _run(cache, _seq(0, PROMPT)) == 0  # one chunk, ending inside block 2: no state
    assert _run(cache, _seq(1, PROMPT)) == 0
    assert cache.stats()["state_checkpoints"] == 0
    assert _run(cache, _seq(2, PROMPT), chunks=[8, 1]) == 0  # ends on block 1's boundary
    assert _run(cache, _seq(3, PROMPT)) == 8
    # the first block is cached, but no state after it: the attention hit is useless
    assert _run(cache, _seq(4, DIVERGES)) == 0
    assert cache.is_whole()


def test_align_keeps_a_checkpoint_at_each_chunks_end_on_a_boundary():
    cache = _cache("align")
    assert _run(cache, _seq(0, PROMPT + [5, 5, 5, 5]), chunks=[5, 8]) == 0
    assert cache.stats()["state_checkpoints"] == 0  # 5 and 13: inside blocks
    assert _run(cache, _seq(1, PROMPT + [5, 5, 5, 5]), chunks=[4, 8, 1]) == 0
    assert cache.stats()["state_checkpoints"] == 2  # at 4 and 12
    assert _run(cache, _seq(2, DIVERGES)) == 4


@pytest.mark.parametrize("computed, n, budget, cut", [
    (0, 9, 16, 8),  # stops at the prompt's last boundary before its last token
    (0, 6, 16, 4),  # back to a block boundary
    (0, 3, 16, 0),  # less than a block that fits the budget: nothing, it waits
    (0, 3, 3, 3),  # a block larger than the budget: computed in pieces
    (2, 1, 3, 1),  # the next piece, short of the boundary
    (3, 3, 3, 1),  # a piece from inside a block stops at its boundary
    (8, 1, 16, 1),  # the prompt's last token
    (2, 5, 16, 2),  # a chunk from inside a block: to the next boundary
])
def test_align_cuts_a_prompt_chunk_to_a_block_boundary(computed, n, budget, cut):
    """vLLM's `_mamba_block_aligned_split` on a 9-token prompt in 4-token blocks, with a
    token budget of `budget` (`max_num_batched_tokens`)."""
    seq = _seq(0, PROMPT)
    seq.num_computed = computed
    assert _cache("align").prefill_chunk(seq, n, budget) == cut
    assert _cache("none").prefill_chunk(seq, n, budget) == n
    assert _cache("all").prefill_chunk(seq, n, budget) == n


LONG = PROMPT[:8] + list(range(20, 29))  # PROMPT's two full blocks, then its own: 17 tokens


def test_align_stops_a_chunk_at_the_shared_prefix_junction():
    """Where a prompt's cached attention blocks end past its hit (no state kept there), the
    chunk stops, so the state there is kept and the next request sharing the prefix hits
    it (vLLM's `shared_prefix_boundary` in `_mamba_block_aligned_split`)."""
    cache = _cache("align")
    assert _run(cache, _seq(0, PROMPT)) == 0  # its blocks cached, no state after them
    seq = _seq(1, LONG)
    assert cache.admission_chunk(seq, 17, 64) == 8  # not to the last boundary, 16
    assert cache.admit(seq, 8) == 0
    assert cache.prefill_chunk(seq, 17, 64) == 8
    seq.num_computed = 8
    assert cache.prefill_chunk(seq, 9, 64) == 8  # past the junction: the last boundary
    assert cache.allocate(seq, 8)
    seq.num_computed = 16
    cache.free(seq)
    assert _run(cache, _seq(2, PROMPT)) == 8  # the junction's state serves the prefix
    assert cache.is_whole()


def test_align_a_hit_on_a_checkpoint_scheduled_this_step_waits():
    """A checkpoint a chunk scheduled in this step keeps is not there to copy yet: a hit
    ending on it is not admitted until the step has run (vLLM's `MambaManager` refuses a
    state block cached in the current step)."""
    cache = _cache("align")
    first = _seq(0, PROMPT)
    assert cache.admit(first, 8) == 0  # its chunk ends on block 1's boundary
    second = _seq(1, PROMPT)
    assert not cache.can_admit(second, 1)
    first.num_computed = 8  # the step ran
    assert cache.can_admit(second, 1) and cache.admit(second) == 8
    second.num_computed = 9
    first.num_computed = 9
    cache.free(first)
    cache.free(second)
    assert cache.is_whole()


def _layout(cache, seq: Sequence, n: int):
    return cache.build_layout([(seq, n)])


def test_the_layout_carries_the_state_copies():
    """The executor copies state bytes as the layout says: a checkpoint from the running
    state it was taken from, a hit's checkpoint into the running state, a parent's into a
    fork's; each once, before the step that follows."""
    cache = _cache("align")
    seq = _seq(0, PROMPT)
    cache.admit(seq, 8)
    assert _layout(cache, seq, 8).state_copies == []
    running = list(cache.states[0])
    seq.num_computed = 8
    assert cache.allocate(seq, 1)  # names blocks 0, 1: the state at 8 is kept
    (copy,) = _layout(cache, seq, 1).state_copies
    assert copy[0] == running and len(copy[1]) == STATE
    assert _layout(cache, seq, 1).state_copies == []  # once
    seq.num_computed = 9
    cache.free(seq)
    hit = _seq(1, PROMPT)
    assert cache.admit(hit) == 8
    hit.num_computed = 8
    assert _layout(cache, hit, 1).state_copies == [(copy[1], cache.states[1])]
    child = _seq(2, PROMPT)
    hit.num_computed = 9
    assert cache.fork(hit, child) == []
    assert _layout(cache, hit, 0).state_copies == [(cache.states[1], cache.states[2])]


def test_all_checkpoints_every_block_at_a_state_per_block():
    cache = _cache("all")
    seq = _seq(0, PROMPT)
    cache.admit(seq)
    assert cache.pool.num_free == 40 - 3 * (1 + STATE)  # each block's state page too
    seq.num_computed = 9
    cache.free(seq)
    assert _run(cache, _seq(1, DIVERGES)) == 4
    assert cache.is_whole()


def test_a_checkpoint_evicted_ends_the_hit_there():
    cache = _cache("align", blocks=9)
    assert _run(cache, _seq(0, PROMPT), chunks=[8, 1]) == 0
    # 9 fresh blocks: 3 + 2 for the next prompt take the free ones, then evict LRU cache
    assert _run(cache, _seq(1, [7] * 17)) == 0
    assert _run(cache, _seq(2, PROMPT)) == 0


def test_a_fork_gives_the_child_its_own_state():
    cache = _cache("align")
    parent, child = _seq(0, PROMPT), _seq(1, PROMPT)
    cache.admit(parent)
    parent.num_computed = 9
    assert cache.fork(parent, child) == []
    child.num_computed = 9
    assert len(cache.states[1]) == STATE
    cache.free(parent)
    cache.free(child)
    assert cache.is_whole()


def test_an_unknown_mode_is_refused_in_one_line():
    with pytest.raises(KvbenchInputError, match="--mamba-cache-mode"):
        _cache("sometimes")
