"""`contiguous` on the `tiny-hybrid` preset (five 128-token window layers to one full layer)
samples `paged`'s greedy tokens at contexts past 4 windows, its window groups in rings that
wrap: with the prompt written whole and in chunks of 96 tokens."""

from __future__ import annotations

import pytest

import kvbench
from kvbench.strategies.base import CHECK_ACCOUNTING_ENV
from tests.conftest import random_prompts


@pytest.mark.parametrize("chunking", [{}, dict(chunked_prefill=True,
                                               max_num_batched_tokens=96)])
def test_tiny_hybrid_contiguous_equals_paged(chunking, monkeypatch):
    monkeypatch.setenv(CHECK_ACCOUNTING_ENV, "1")
    prompts = random_prompts(3, 2048, seed=1, min_len=4 * 128 + 8, max_len=600)
    common = dict(model="tiny-hybrid", kv_memory="16MiB", max_model_len=1024, **chunking)
    paged = kvbench.generate(prompts, 24, strategy="paged", **common)
    assert kvbench.generate(prompts, 24, strategy="contiguous", **common) == paged
