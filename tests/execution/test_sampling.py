"""Greedy sampling on the CPU picks what torch's argmax picks, ties and NaN included."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbench.execution.sampling import sample_tokens


@settings(max_examples=50, deadline=None)
@given(rows=st.integers(1, 9), vocab=st.integers(1, 300), seed=st.integers(0, 2**31 - 1),
       levels=st.integers(1, 4))
def test_greedy_is_torch_argmax_first_maximal_index(rows, vocab, seed, levels):
    generator = torch.Generator().manual_seed(seed)
    # few distinct values: most rows hold ties for the maximum
    logits = torch.randint(levels, (rows, vocab), generator=generator).float()
    with torch.inference_mode():
        assert sample_tokens(logits, 0.0, 0, []) == logits.argmax(dim=-1).tolist()


def test_greedy_row_with_nan_picks_the_nan_as_torch_does():
    logits = torch.tensor([[0.0, 1.0, float("nan"), 3.0, float("nan")]])
    assert sample_tokens(logits, 0.0, 0, []) == logits.argmax(dim=-1).tolist() == [2]
