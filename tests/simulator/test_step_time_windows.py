"""The step-time model charges a sliding-window layer's attention for the tokens its window
reaches, min(context, W), not the whole context; full-attention layers for the context."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvbench.models.presets import get_preset
from kvbench.simulator.gpu_lookup import get_gpu
from kvbench.simulator.step_time import StepTimeModel, attention_decode_s, attention_prefill_s

GPU = get_gpu("h100-80gb")


def without_window(model):
    return replace(model, sliding_window=None, layer_types=())


def test_decode_reads_the_window_in_window_layers():
    """Gemma-3-27B: 10 full layers read 32768 tokens a sequence, 52 window layers 1024."""
    model = get_preset("gemma-3-27b")
    step = StepTimeModel(model, GPU, 2, 2)
    layer_bytes = 2 * 16 * 128 * 2
    batch, context = 8, 32768
    expected = (10 * attention_decode_s(GPU.constants, step.hw, batch,
                                        batch * context * layer_bytes)
                + 52 * attention_decode_s(GPU.constants, step.hw, batch,
                                          batch * 1024 * layer_bytes))
    got = step.cost([1] * batch, [context] * batch, batch).parts["attention_decode"]
    assert got == pytest.approx(expected)
    full = StepTimeModel(without_window(model), GPU, 2, 2)
    assert got < full.cost([1] * batch, [context] * batch, batch).parts["attention_decode"] / 3


def test_a_window_longer_than_the_context_changes_nothing():
    model = get_preset("gemma-2-27b")  # 4096-token window
    windowed, full = StepTimeModel(model, GPU, 2, 2), StepTimeModel(without_window(model), GPU, 2, 2)
    for query_lens, seq_lens in (([1] * 4, [4096, 100, 2000, 4000]), ([512, 1], [3000, 4096])):
        assert windowed.cost(query_lens, seq_lens, 2).time_s == pytest.approx(
            full.cost(query_lens, seq_lens, 2).time_s)


def test_decode_cost_grows_with_the_window_not_the_context():
    """Every layer of Mistral-7B has a 4096-token window: 8K and 64K contexts cost the same."""
    step = StepTimeModel(get_preset("mistral-7b"), GPU, 2, 2)
    at_8k = step.cost([1] * 16, [8192] * 16, 16)
    at_64k = step.cost([1] * 16, [65536] * 16, 16)
    assert at_8k.time_s == at_64k.time_s and at_8k.bytes == at_64k.bytes


def test_prefill_scores_each_query_against_its_window():
    """A 2048-token chunk ending at 6144 with W = 4096: query i scores min(i + 1, W) keys,
    counted by a plain loop, and reads the chunk plus the W - 1 tokens before it."""
    model = get_preset("mistral-7b")
    step = StepTimeModel(model, GPU, 2, 2)
    q, s, window = 2048, 6144, 4096
    pairs = sum(min(i + 1, window) for i in range(s - q, s))
    per_pair = 4 * 32 * 128
    layer_bytes = 2 * 8 * 128 * 2
    expected = 32 * (attention_prefill_s(GPU.constants, step.hw, q, per_pair * pairs)
                     + min(s, q + window - 1) * layer_bytes / GPU.hbm_bandwidth_bytes_s)
    got = step.cost([q], [s], 1)
    assert got.parts["attention_prefill"] == pytest.approx(expected)
    full = StepTimeModel(without_window(model), GPU, 2, 2).cost([q], [s], 1)
    assert got.flops < full.flops


def test_gemma_counts_its_four_norms():
    """Pre/post feed-forward norms: two more elementwise kernels a layer, each reading and
    writing the hidden state."""
    from kvbench.simulator.step_time import elementwise_s

    gemma = get_preset("gemma-2-27b")
    four = StepTimeModel(gemma, GPU, 2, 2)
    two = StepTimeModel(replace(gemma, architecture="llama"), GPU, 2, 2)
    tokens = 512  # bf16 activations: 2 B, two norms each reading and writing 4608
    extra = 46 * elementwise_s(GPU.constants, four.hw, 2, tokens * 2 * 2 * 2 * 4608)
    got = four.cost([tokens], [tokens], 1).parts["elementwise"]
    assert got - two.cost([tokens], [tokens], 1).parts["elementwise"] == pytest.approx(extra)
