"""The one KV budget formula and the one capacity formula, against figures worked by hand."""

from __future__ import annotations

from fractions import Fraction

import pytest

from kvbench.errors import KvbenchInputError
from kvbench.sizing.capacity import kv_capacity
from kvbench.sizing.kv_budget import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    gpu_memory_utilization,
    kv_budget_bytes,
)

GiB = 1024**3


def test_budget_is_usable_memory_less_weights_and_activations():
    # floor(80 GiB x 0.9) = 77,309,411,328; less 16 GiB of weights and 1 GiB of activations.
    assert kv_budget_bytes(80 * GiB, 0.9, 16 * GiB, GiB) == 59_055_800_320
    assert kv_budget_bytes(80 * GiB, None, 16 * GiB, GiB) == 59_055_800_320  # 0.9 by default
    assert kv_budget_bytes(80 * GiB, "50%", 16 * GiB) == 24 * GiB
    assert kv_budget_bytes(80 * GiB, Fraction(1, 2), 16 * GiB) == 24 * GiB


def test_utilization_is_exact_not_the_nearest_double():
    # 100 x 0.29 is 28.999999999999996 in doubles; 100 x 29/100 is 29.
    assert kv_budget_bytes(100, 0.29, 0) == 29
    assert DEFAULT_GPU_MEMORY_UTILIZATION == Fraction(9, 10)
    assert gpu_memory_utilization(None) == Fraction(9, 10)
    assert gpu_memory_utilization(0.92) == Fraction(23, 25)


def test_budget_refuses_when_nothing_is_left_naming_figures_and_advice():
    with pytest.raises(KvbenchInputError) as err:
        kv_budget_bytes(40 * GiB, 0.9, 30 * GiB, 8 * GiB, where=" on a100-40gb",
                        advice="use a larger --gpu")
    message = str(err.value)
    assert message.startswith("no memory left for the KV cache on a100-40gb: 40.00 GiB x 0.9 =")
    assert "the weights (30.00 GiB) and activations (~8.00 GiB)" in message
    assert message.endswith("; use a larger --gpu")
    with pytest.raises(KvbenchInputError, match=r"must be in \(0, 1\]"):
        kv_budget_bytes(40 * GiB, 1.5, 0)


def test_capacity_counts_whole_tokens_then_whole_sequences():
    # 59,055,800,320 B at 131,072 B per token (llama-3-8b, bf16) hold 450,560 tokens,
    # 110 sequences of 4,096 tokens (450,560 / 4,096 = 110.0) and 109 of 4,097.
    assert kv_capacity(59_055_800_320, 131_072) == 450_560
    assert kv_capacity(59_055_800_320, 131_072, 4096) == 110
    assert kv_capacity(59_055_800_320, 131_072, 4097) == 109
    assert kv_capacity(1000, 32) == 31 and kv_capacity(1000, 32, 10) == 3
    assert kv_capacity(31, 32) == 0
