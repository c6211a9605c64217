"""`TokenSampler` draws in chunks: the ids must be those of one draw of the whole total, cut
in order, whatever the lengths (long rows, empty rows, rows across chunk edges)."""

from __future__ import annotations

import numpy as np
import pytest

from kvbench.workloads import sampling
from kvbench.workloads.sampling import TokenSampler, rng_for


def _one_draw_rows(seed: int, vocab_size: int, lengths: list[int]) -> list[tuple[int, ...]]:
    """The reference: every id in one numpy draw, then sliced per row."""
    flat = rng_for(seed, "t").integers(0, vocab_size, sum(lengths), dtype=np.int64).tolist()
    ends = np.cumsum(lengths).tolist()
    return [tuple(flat[a:b]) for a, b in zip([0, *ends[:-1]], ends, strict=True)]


@pytest.mark.parametrize("lengths", [
    [0, 5, 0, 3],
    [40, 1, 1, 1, 70, 0, 13],  # rows longer than a chunk, rows across chunk edges
    np.random.default_rng(1).integers(0, 60, 300).tolist(),
])
def test_rows_are_one_draw_cut_in_order(monkeypatch, lengths):
    monkeypatch.setattr(sampling, "_DRAW_TOKENS", 32)
    rows = TokenSampler(rng_for(7, "t"), 1000).rows(lengths)
    assert rows == _one_draw_rows(7, 1000, lengths)
    assert [len(r) for r in rows] == lengths


def test_tokens_are_one_draw_and_share_int_objects(monkeypatch):
    monkeypatch.setattr(sampling, "_DRAW_TOKENS", 32)
    tokens = TokenSampler(rng_for(3, "t"), 300).tokens(1000)  # ids past Python's small ints
    assert tokens == list(_one_draw_rows(3, 300, [1000])[0])
    assert all(type(t) is int for t in tokens)
    # one object per id, so a long workload costs a pointer per token
    assert len({id(t) for t in tokens}) == len(set(tokens))
