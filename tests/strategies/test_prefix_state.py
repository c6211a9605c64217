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


def test_align_hits_where_a_prompt_ended_not_inside_it():
    cache = _cache("align")
    assert _run(cache, _seq(0, PROMPT)) == 0
    assert _run(cache, _seq(1, PROMPT)) == 8  # the checkpoint at the prompt's last boundary
    # the first block is cached, but no state after it: the attention hit is useless
    assert _run(cache, _seq(2, DIVERGES)) == 0
    assert cache.stats()["cache_ceiling_tokens"] == 8 + 4
    assert cache.is_whole()


def test_align_keeps_a_checkpoint_at_each_chunks_end():
    cache = _cache("align")
    assert _run(cache, _seq(0, PROMPT + [5, 5, 5, 5]), chunks=[5, 8]) == 0
    # the first chunk ended in block 1: vLLM would have cut it at 4, where the state is kept
    assert _run(cache, _seq(1, DIVERGES)) == 4


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
    assert _run(cache, _seq(0, PROMPT)) == 0
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
