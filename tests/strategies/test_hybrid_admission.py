"""`hybrid`'s admission as vLLM's `allocate_slots` with `full_sequence_must_fit`: a window
group is asked for at most ceil((W - 1 + max_num_batched_tokens) / block) + 1 blocks, what it
can hold of one sequence at once; `required_slots` (what `RequestCheck` compares with the
arena) asks the same, so a request vLLM serves is not refused."""

from __future__ import annotations

from kvbench.core.request import Request
from kvbench.core.sequence import Sequence
from kvbench.strategies.hybrid import HybridStrategy


def _seq(seq_id: int, prompt_len: int, output_len: int) -> Sequence:
    prompt = tuple(range(prompt_len))
    return Sequence(seq_id, Request(seq_id, 0.0, prompt, output_len), 0, list(prompt))


def test_a_window_group_is_asked_for_its_cap_not_the_whole_length():
    # one full-attention group and five of a 128-token window, 16-token blocks, budget 256
    strategy = HybridStrategy(200 * 16, 4096, block_size=16, watermark=0.0,
                              allocation_windows=(None,) + (128,) * 5,
                              max_num_batched_tokens=256, check_accounting=True)
    assert strategy.admission_caps == (None,) + (25,) * 5  # ceil((127 + 256) / 16) + 1
    seq = _seq(0, 696, 116)  # 811 tokens at the end: 51 blocks a group
    assert strategy.required_slots(seq) == (51 + 5 * 25) * 16  # fits 200 blocks
    assert strategy.required_slots(seq) <= strategy.capacity_slots
    assert strategy.can_admit(seq, 0)
    strategy.admit(seq, 256)  # the first chunk: 16 blocks a group
    assert strategy.pool.num_free == 200 - 6 * 16


def test_each_chunk_frees_behind_the_window_so_a_group_stays_within_its_cap():
    strategy = HybridStrategy(400 * 16, 4096, block_size=16, watermark=0.0,
                              allocation_windows=(None, 128), max_num_batched_tokens=256,
                              check_accounting=True)
    seq = _seq(0, 900, 4)
    strategy.admit(seq, 256)
    seq.num_computed += 256
    while seq.num_uncomputed:
        n = min(seq.num_uncomputed, 256)
        assert strategy.allocate(seq, n)
        window_held = sum(1 for b in strategy.tables[0][1] if b >= 0)
        assert window_held <= strategy.admission_caps[1]
        seq.num_computed += n
    assert sum(1 for b in strategy.tables[0][0] if b >= 0) == -(-900 // 16)
