"""`paged` holding a state-space hybrid's recurrent state: `state_blocks` blocks a sequence
from admission to finish, whatever its length; counted as held without tokens."""

from __future__ import annotations

import pytest

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.strategies import make_strategy, reads_option


def _seq(seq_id: int, prompt: int, out: int = 4) -> Sequence:
    return Sequence(seq_id, Request(seq_id, 0.0, tuple(range(prompt)), out), 0,
                    list(range(prompt)))


def test_paged_and_prefix_take_a_state():
    assert reads_option("paged", "state_blocks") and reads_option("prefix", "state_blocks")
    assert reads_option("prefix", "mamba_cache_mode")
    assert not reads_option("paged", "mamba_cache_mode")


def test_a_sequence_holds_its_state_blocks_from_admission_to_free():
    paged = make_strategy("paged", 16 * 20, 4096, block_size=16, watermark=0.0,
                          state_blocks=3, check_accounting=True)
    seq = _seq(0, 20)
    assert paged.required_slots(seq) == (2 + 3) * 16
    assert paged.can_admit(seq, 0)
    paged.admit(seq)
    assert paged.pool.num_free == 20 - 2 - 3
    split = paged.memory_split([seq], None)
    assert split.internal >= 3 * 16 and split.free == (20 - 5) * 16
    # growing allocates attention blocks only
    seq.num_computed = 32
    assert paged.allocate(seq, 1) and paged.pool.num_free == 20 - 3 - 3
    paged.free(seq)
    assert paged.pool.num_free == 20 and paged.is_whole()


def test_admission_needs_room_for_the_state_too():
    paged = make_strategy("paged", 16 * 10, 4096, block_size=16, watermark=0.0,
                          state_blocks=4, check_accounting=True)
    first, second = _seq(0, 16), _seq(1, 16)
    paged.admit(first)  # 1 + 4 blocks
    assert paged.can_admit(second, 1)  # 5 more fit exactly
    paged.admit(second)
    assert not paged.can_admit(_seq(2, 1), 2)
    with pytest.raises(MemoryError):
        paged.admit(_seq(3, 1))
    paged.memory_split([first, second], None)  # the running totals match the books


def test_a_fork_gives_the_child_its_own_state():
    paged = make_strategy("paged", 16 * 12, 4096, block_size=16, watermark=0.0,
                          state_blocks=2, check_accounting=True)
    parent, child = _seq(0, 30), _seq(1, 30)
    paged.admit(parent)
    assert paged.fork(parent, child) is not None
    assert paged.pool.num_free == 12 - 2 * (2 + 2)
    paged.free(parent)
    paged.free(child)
    assert paged.is_whole()


def test_without_a_state_paged_is_unchanged():
    paged = make_strategy("paged", 16 * 4, 4096, block_size=16)
    assert paged.state_blocks == 0 and paged.decode_runs
    seq = _seq(0, 20)
    paged.admit(seq)
    assert paged.pool.num_free == 2
