"""`contiguous`: reservation sizes, admission, and the memory split."""

from __future__ import annotations

import pytest

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.errors import KvbenchInputError
from kvbench.strategies.contiguous import ContiguousStrategy


def seq(seq_id: int, prompt_len: int, output_len: int) -> Sequence:
    request = Request(seq_id, 0.0, tuple(range(prompt_len)), output_len)
    return Sequence(seq_id, request, 0, list(request.prompt_token_ids))


@pytest.mark.parametrize(
    ("reserve", "expected"), [("max", 256), ("pow2", 64), ("exact", 49)]
)
def test_reservation_modes(reserve, expected):
    strategy = ContiguousStrategy(1024, max_model_len=256, reserve=reserve)
    s = seq(0, 20, 30)  # final KV length 20 + 30 - 1 = 49
    assert strategy.reservation(s) == expected


def test_unknown_reserve_mode_is_input_error():
    with pytest.raises(KvbenchInputError):
        ContiguousStrategy(10, 10, reserve="half")


def test_admission_waits_for_a_hole_and_split_adds_up():
    strategy = ContiguousStrategy(300, max_model_len=100, reserve="max")
    running = []
    for i in range(3):
        s = seq(i, 10, 5)
        assert strategy.can_admit(s, len(running))
        strategy.admit(s)
        running.append(s)
    waiting = seq(9, 10, 5)
    assert not strategy.can_admit(waiting, 3)
    strategy.free(running.pop(1))  # a 100-slot hole in the middle
    assert strategy.can_admit(waiting, 2)
    running[0].num_computed = 10
    split = strategy.memory_split(running, None)
    assert split.total == 300
    assert split.token == 10
    # final KV length 14 each: the first will still use 4 slots, the second all 14
    assert split.reserved == 4 + 14
    assert split.internal == (100 - 14) * 2
    assert split.free == 100


def test_external_fragmentation_counts_holes_too_small_for_the_queue_head():
    strategy = ContiguousStrategy(250, max_model_len=100, reserve="max")
    seqs = [seq(i, 10, 5) for i in range(2)]
    for s in seqs:
        strategy.admit(s)
    # free tail: 50 slots, smaller than the head's 100-slot reservation
    head = seq(5, 10, 5)
    split = strategy.memory_split(seqs, head)
    assert split.external == 50 and split.free == 0
    assert strategy.memory_split(seqs, None).external == 0


def test_never_preempts_and_is_whole_after_free():
    strategy = ContiguousStrategy(200, max_model_len=100, reserve="exact")
    s = seq(0, 50, 51)  # exactly 100 slots
    strategy.admit(s)
    for _ in range(50):
        assert strategy.allocate(s, 1)
        s.num_computed += 1
    strategy.free(s)
    assert strategy.is_whole()
